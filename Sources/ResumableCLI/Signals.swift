import Dispatch
import Foundation

/// Delivers SIGINT and SIGTERM as an async stream instead of killing the process.
///
/// Each signal's default action is replaced by `SIG_IGN` and a dispatch source reports it, so the tool can
/// pause the download, write its resume token and exit with 130 or 143. Keep the watcher alive for as long
/// as signals should be caught.
final class SignalWatcher {
    /// The signals, in the order they arrived.
    let signals: AsyncStream<Int32>
    private let sources: [any DispatchSourceSignal]

    /// Starts watching `watched` (SIGINT and SIGTERM by default).
    init(_ watched: [Int32] = [SIGINT, SIGTERM]) {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self, bufferingPolicy: .bufferingNewest(8))
        let queue = DispatchQueue(label: "resumable.signals")
        var sources: [any DispatchSourceSignal] = []
        for number in watched {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { @Sendable in continuation.yield(number) }
            source.resume()
            sources.append(source)
        }
        self.signals = stream
        self.sources = sources
    }

    deinit {
        for source in sources { source.cancel() }
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
