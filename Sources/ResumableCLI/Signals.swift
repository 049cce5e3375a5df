import CResumable
import Foundation
import Synchronization

/// Delivers SIGINT and SIGTERM as an async stream instead of killing the process.
///
/// A `sigaction` handler writes each signal's number to a pipe and one thread of the tool's reads it, so the
/// tool can pause the download, write its resume token and exit with 130 or 143. (libdispatch's signal
/// sources on Linux could lose a signal now and then: Ctrl-C was ignored in about 2% of runs.) Keep the
/// watcher alive for as long as signals should be caught; one watcher at a time receives them.
final class SignalWatcher: Sendable {
    /// The signals, in the order they arrived.
    let signals: AsyncStream<Int32>
    private let continuation: AsyncStream<Int32>.Continuation

    /// Where the reading thread forwards signals: the newest watcher's stream.
    private static let receiver = Mutex<AsyncStream<Int32>.Continuation?>(nil)
    /// Whether the reading thread runs (it is started once per process).
    private static let readerStarted = Atomic<Bool>(false)

    /// Starts the thread that reads the signal pipe, once.
    private static func startReader() {
        guard !readerStarted.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let thread = Thread {
            while true {
                let number = cresumable_signals_next()
                guard number >= 0 else { return }
                _ = receiver.withLock { $0?.yield(Int32(number)) }
            }
        }
        thread.name = "resumable.signals"
        thread.start()
    }

    /// Starts watching `watched` (SIGINT and SIGTERM by default).
    init(_ watched: [Int32] = [SIGINT, SIGTERM]) {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self, bufferingPolicy: .bufferingNewest(8))
        self.signals = stream
        self.continuation = continuation
        Self.receiver.withLock { $0 = continuation }
        let numbers = watched.map { CInt($0) }
        _ = numbers.withUnsafeBufferPointer { cresumable_signals_install($0.baseAddress, CInt($0.count)) }
        Self.startReader()
    }

    deinit {
        // Signals that still arrive go to a finished stream (a no-op) until a newer watcher takes over.
        continuation.finish()
    }

    /// The first signal to arrive; `nil` when the waiting task is cancelled.
    func next() async -> Int32? {
        for await number in signals { return number }
        return nil
    }

    /// `SIGINT`, `SIGTERM`, or `signal N`.
    static func name(of number: Int32) -> String {
        switch number {
        case SIGINT: return "SIGINT"
        case SIGTERM: return "SIGTERM"
        default: return "signal \(number)"
        }
    }
}
