import Dispatch
import Foundation
import Synchronization

/// The SHA-256 of a temporary file, computed while the file is being written: a thread of its own reads the file
/// back from byte 0 (from the page cache, in chunks of 1 MiB, with `pread`) as far as its trusted prefix has grown,
/// so that when the download ends at most about a chunk is left to hash.
///
/// The writer calls ``advance(to:)`` after each write that extends the prefix of bytes that are final (written and
/// never to be rewritten); that call is cheap and never blocks, so it can follow every body write. At the end,
/// ``digest(length:)`` waits for the rest and returns the digest. ``cancel()`` (or dropping the hasher) stops the
/// thread.
///
/// The hasher trusts the prefix it is given: the bytes below it must not change afterwards. A file cut below the
/// prefix (a restart from 0, a truncation to an earlier offset) needs a new hasher; cancel this one first. Stop the
/// hasher (``digest(length:)`` or ``cancel()``) before releasing the file.
///
/// The thread is a `Thread` of its own, never one of Swift concurrency's cooperative pool nor a global dispatch
/// queue: it blocks on the disk when the page cache no longer holds the bytes. It starts on the first
/// ``advance(to:)`` (or ``digest(length:)``), and ends with the digest, a failure, or ``cancel()``.
final class PrefixHasher: Sendable {
    /// Test seams: code that runs on the hashing thread before each read and when the thread ends, and on the
    /// caller's thread just before ``digest(length:)`` starts waiting.
    struct Hooks: Sendable {
        var beforeRead: (@Sendable (_ offset: Int64, _ count: Int) -> Void)?
        var threadDidEnd: (@Sendable () -> Void)?
        var digestWillWait: (@Sendable () -> Void)?
    }

    private let worker: Worker

    /// A hasher for `file`, from byte 0. Does not block and starts no thread yet: that happens on the first
    /// ``advance(to:)``.
    ///
    /// - Parameters:
    ///   - portableOnly: Hash with the portable C code even where libcrypto is at hand (tests, comparisons).
    ///   - chunkSize: How much one read takes (1 MiB). The thread reads whole chunks, and sleeps until a whole chunk
    ///     more is declared; only ``digest(length:)`` makes it read a shorter tail.
    init(file: PartialFile, portableOnly: Bool = false, chunkSize: Int = 1 << 20, hooks: Hooks = Hooks()) {
        worker = Worker(file: file, portableOnly: portableOnly, chunkSize: max(chunkSize, 1), hooks: hooks)
    }

    deinit {
        worker.cancel()
    }

    /// Where the digest is computed: libcrypto when it loaded (and `portableOnly` was not asked for).
    var backend: SHA256Backend { worker.portableOnly ? .portable : .fastest }

    /// How many bytes from byte 0 are hashed so far.
    var bytesHashed: Int64 { worker.hashed.load(ordering: .relaxed) }

    /// Says that the first `prefix` bytes of the file are written and final, so the thread may hash them.
    ///
    /// Non-blocking and cheap (an atomic maximum, plus a wake-up only when the thread sleeps): meant to be called
    /// after every body write. Values below an earlier one are ignored.
    func advance(to prefix: Int64) {
        worker.advance(to: prefix)
    }

    /// The lowercase hex SHA-256 of the first `length` bytes of the file: waits until the thread has hashed them
    /// (it implies ``advance(to:)`` with `length`). After it the hasher is done; asking again for the same length
    /// returns the same digest.
    ///
    /// Blocks the calling thread for as long as the rest of the file takes to hash; call it where blocking is
    /// allowed, not on the cooperative pool.
    ///
    /// - Throws: ``ResumableError/Code/fileSystem`` when a read fails, the file holds fewer than `length` bytes, the
    ///   file was released meanwhile, or `length` is negative or below a prefix already passed to ``advance(to:)``
    ///   (the hasher cannot go back); ``ResumableError/Code/cancelled`` after ``cancel()``.
    func digest(length: Int64) throws(ResumableError) -> String {
        try worker.digest(length: length)
    }

    /// Stops the thread at its next chunk (or at once when it sleeps) and makes a waiting or later
    /// ``digest(length:)`` throw ``ResumableError/Code/cancelled``, without waiting for the thread. Idempotent.
    func cancel() {
        worker.cancel()
    }
}

extension PrefixHasher {
    /// The state the hashing thread shares with the hasher. Separate from ``PrefixHasher`` so that the thread does not
    /// keep the hasher alive: dropping the hasher cancels the thread.
    ///
    /// The thread reads whole chunks only (until ``digest(length:)`` asks for the tail), so it sleeps until a whole
    /// chunk past what it hashed is declared: a writer whose writes are much smaller than a chunk wakes it at most
    /// once per chunk, and a busy thread is never signalled.
    ///
    /// The fast path (``advance(to:)``) touches only atomics: `wanted` grows with an atomic maximum; the thread, before
    /// sleeping, publishes in `wakeAt` the prefix that is worth waking it for (`Int64.max` while it does not sleep),
    /// and only a writer whose prefix reaches it signals the `wake` semaphore. The thread sets `wakeAt`, then checks
    /// once more for work; the writer raises `wanted`, then reads `wakeAt`. Both orders are sequentially consistent,
    /// so at least one side sees the other: no wake-up is lost, and whichever side resets `wakeAt` to `Int64.max`
    /// decides whether a signal is sent (exactly one per sleep).
    fileprivate final class Worker: Sendable {
        let file: PartialFile
        let portableOnly: Bool
        let chunkSize: Int
        let hooks: Hooks

        /// The prefix the writer declared final.
        let wanted = Atomic<Int64>(0)
        /// The length ``digest(length:)`` asked for; `Int64.max` until then.
        let limit = Atomic<Int64>(.max)
        /// Bytes hashed so far (written by the thread only).
        let hashed = Atomic<Int64>(0)
        let cancelled = Atomic<Bool>(false)
        let started = Atomic<Bool>(false)
        /// While the thread sleeps, the prefix that wakes it; `Int64.max` otherwise.
        let wakeAt = Atomic<Int64>(.max)
        let digestAsked = Atomic<Bool>(false)
        /// Signalled once per sleep of the thread, by whoever resets `wakeAt`.
        let wake = DispatchSemaphore(value: 0)
        /// The digest or the failure, set once; `finished` is signalled when it is.
        let outcome = Mutex<Result<String, ResumableError>?>(nil)
        let finished = DispatchSemaphore(value: 0)

        init(file: PartialFile, portableOnly: Bool, chunkSize: Int, hooks: Hooks) {
            self.file = file
            self.portableOnly = portableOnly
            self.chunkSize = chunkSize
            self.hooks = hooks
        }

        func advance(to prefix: Int64) {
            let (previous, _) = wanted.max(prefix, ordering: .sequentiallyConsistent)
            guard prefix > previous else { return }
            if start() { return }
            let threshold = wakeAt.load(ordering: .sequentiallyConsistent)
            guard prefix >= threshold else { return }
            if wakeAt.compareExchange(
                expected: threshold, desired: .max, ordering: .sequentiallyConsistent
            ).exchanged {
                wake.signal()
            }
        }

        func digest(length: Int64) throws(ResumableError) -> String {
            guard !cancelled.load(ordering: .sequentiallyConsistent) else { throw cancelledError() }
            guard length >= 0 else {
                throw ResumableError(.fileSystem, "hashing '\(file.path)' failed: a negative length (\(length))")
            }
            if digestAsked.exchange(true, ordering: .sequentiallyConsistent) {
                // Asked before: the limit is set (or being set by another caller, who wakes the thread).
                guard limit.load(ordering: .sequentiallyConsistent) == length else {
                    throw ResumableError(
                        .fileSystem, "hashing '\(file.path)' failed: its digest was already asked for another length")
                }
            } else {
                let declared = wanted.load(ordering: .sequentiallyConsistent)
                guard declared <= length else {
                    let error = ResumableError(
                        .fileSystem,
                        "hashing '\(file.path)' failed: the digest of \(length) bytes was asked after \(declared)"
                            + " were declared final")
                    finish(.failure(error))
                    stop()
                    throw error
                }
                limit.store(length, ordering: .sequentiallyConsistent)
                wanted.max(length, ordering: .sequentiallyConsistent)
                if !start() { wakeNow() }
            }
            hooks.digestWillWait?()
            return try waitForOutcome()
        }

        func cancel() {
            finish(.failure(cancelledError()))
            stop()
        }

        /// Makes the thread end at its next step, waking it when it sleeps. Idempotent.
        private func stop() {
            guard !cancelled.exchange(true, ordering: .sequentiallyConsistent) else { return }
            // Only a thread that runs needs waking; one never started stays so.
            if started.load(ordering: .sequentiallyConsistent) { wakeNow() }
        }

        private func cancelledError() -> ResumableError {
            ResumableError(.cancelled, "hashing '\(file.path)' was cancelled")
        }

        private func waitForOutcome() throws(ResumableError) -> String {
            finished.wait()
            finished.signal()  // for any other waiter
            let result = outcome.withLock { $0 }
            switch result {
            case .success(let digest): return digest
            case .failure(let error): throw error
            case nil: throw ResumableError(.fileSystem, "hashing '\(file.path)' ended without a result")
            }
        }

        /// Records the outcome unless one is recorded, and wakes the waiters.
        private func finish(_ result: Result<String, ResumableError>) {
            let first = outcome.withLock { outcome in
                guard outcome == nil else { return false }
                outcome = result
                return true
            }
            if first { finished.signal() }
        }

        /// Starts the thread unless it was started; whether this call started it.
        private func start() -> Bool {
            guard !started.load(ordering: .sequentiallyConsistent),
                !started.exchange(true, ordering: .sequentiallyConsistent)
            else { return false }
            let thread = Thread { [self] in run() }
            thread.name = "Resumable SHA-256"
            thread.start()
            return true
        }

        /// Wakes the thread if it sleeps, whatever the threshold it sleeps for.
        private func wakeNow() {
            if wakeAt.load(ordering: .sequentiallyConsistent) != .max,
                wakeAt.exchange(.max, ordering: .sequentiallyConsistent) != .max
            {
                wake.signal()
            }
        }

        /// What the thread should do next, after hashing `done` bytes.
        private enum Step {
            case stop
            case fail(ResumableError)
            case hash(upTo: Int64)
            case finalize
            case wait
        }

        private func nextStep(after done: Int64) -> Step {
            if cancelled.load(ordering: .sequentiallyConsistent) { return .stop }
            let limit = limit.load(ordering: .sequentiallyConsistent)
            if done == limit { return .finalize }
            if done > limit {
                // Only when advance(to:) raced digest(length:) with a larger prefix: the digest cannot go back.
                return .fail(
                    ResumableError(
                        .fileSystem,
                        "hashing '\(file.path)' failed: \(done) bytes were hashed before a digest of \(limit) was asked"
                    ))
            }
            let target = min(wanted.load(ordering: .sequentiallyConsistent), limit)
            // Whole chunks only, until the digest asks for the tail.
            let enough = limit != .max ? target > done : target - done >= Int64(chunkSize)
            return enough ? .hash(upTo: target) : .wait
        }

        /// The hashing thread: hashes what is declared, sleeps when it has caught up, ends with the digest, a
        /// failure, or cancellation.
        private func run() {
            var hasher = SHA256Hasher(portableOnly: portableOnly)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkSize, alignment: 64)
            defer {
                buffer.deallocate()
                hooks.threadDidEnd?()
            }
            var done: Int64 = 0
            while true {
                switch nextStep(after: done) {
                case .stop:
                    return
                case .fail(let error):
                    finish(.failure(error))
                    return
                case .finalize:
                    do throws(ResumableError) {
                        finish(.success(try hasher.finalize()))
                    } catch {
                        finish(.failure(ResumableError(.fileSystem, "hashing '\(file.path)' failed: \(error.message)")))
                    }
                    return
                case .hash(let target):
                    let count = Int(min(Int64(chunkSize), target - done))
                    hooks.beforeRead?(done, count)
                    let read: Int
                    do throws(ResumableError) {
                        read = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count]), at: done)
                    } catch {
                        finish(.failure(error))
                        return
                    }
                    guard read > 0 else {
                        finish(
                            .failure(
                                ResumableError(
                                    .fileSystem,
                                    "hashing '\(file.path)' failed: the file ends at \(done) bytes, \(target) expected"
                                )))
                        return
                    }
                    // Cancelled during the read: the bytes are of no use.
                    if cancelled.load(ordering: .relaxed) { return }
                    hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<read]))
                    done += Int64(read)
                    hashed.store(done, ordering: .relaxed)
                case .wait:
                    wakeAt.store(done + Int64(chunkSize), ordering: .sequentiallyConsistent)
                    if case .wait = nextStep(after: done) {
                        wake.wait()
                    } else if wakeAt.exchange(.max, ordering: .sequentiallyConsistent) == .max {
                        // A writer reset `wakeAt` meanwhile and signals (or signalled): take that signal.
                        wake.wait()
                    }
                }
            }
        }
    }
}
