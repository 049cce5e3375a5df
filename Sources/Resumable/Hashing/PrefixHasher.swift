import Dispatch
import Foundation
import Synchronization

/// The SHA-256 of a temporary file, computed while the file is being written: a thread of its own hashes the file
/// from byte 0, in chunks of 1 MiB, as far as its trusted prefix has grown, so that when the download ends at most
/// about a chunk is left to hash.
///
/// The writer calls ``advance(to:)`` after each write that extends the prefix of bytes that are final (written and
/// never to be rewritten); that call is cheap and never blocks, so it can follow every body write. At the end,
/// ``digest(length:)`` waits for the rest and returns the digest. ``cancel()`` (or dropping the hasher) stops the
/// thread.
///
/// **Where the bytes come from.** A writer that writes the file in order also hands each piece it wrote to
/// ``keep(_:at:)``, which copies it into one of a few chunk-sized slots; the thread hashes a full slot from memory
/// and gives it back. Whatever no slot holds (the bytes on disk before a resume, pieces written while every slot
/// waited for the thread, a multi-connection phase) the thread reads back from the file with `pread`, from the page
/// cache. Into a file system in memory that read-back cost about as much CPU as the hash itself (≈ 0.4 s of system
/// time per GiB); a copy into a slot costs a tenth of it. The writer never waits for a slot: when none is free it
/// keeps nothing, and the file is read instead.
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
        /// On the hashing thread, before it hashes `count` bytes at `offset` from a slot (not from the file).
        var beforeHashingKept: (@Sendable (_ offset: Int64, _ count: Int) -> Void)?
    }

    /// How many chunk-sized slots ``keep(_:at:)`` fills for the thread: enough to ride out the thread's turns off a
    /// busy CPU (8 MiB with 1 MiB chunks), and address space only until the writer touches a slot.
    static let defaultSlotCount = 8

    private let worker: Worker

    /// A hasher for `file`, from byte 0. Does not block and starts no thread yet: that happens on the first
    /// ``advance(to:)``.
    ///
    /// - Parameters:
    ///   - portableOnly: Hash with the portable C code even where libcrypto is at hand (tests, comparisons).
    ///   - chunkSize: How much one read takes (1 MiB), and the size of a slot. The thread hashes whole chunks, and
    ///     sleeps until a whole chunk more is declared; only ``digest(length:)`` makes it hash a shorter tail.
    ///   - slotCount: How many slots ``keep(_:at:)`` may fill (0: every byte is read back from the file).
    init(
        file: PartialFile, portableOnly: Bool = false, chunkSize: Int = 1 << 20,
        slotCount: Int = PrefixHasher.defaultSlotCount, hooks: Hooks = Hooks()
    ) {
        worker = Worker(
            file: file, portableOnly: portableOnly, chunkSize: max(chunkSize, 1), slotCount: max(slotCount, 0),
            hooks: hooks)
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

    /// Offers a copy of `bytes`, just written at `offset`, so that the thread hashes them from memory rather than
    /// reading them back. Call it after the write succeeded and before ``advance(to:)`` declares them; only for bytes
    /// that stay as written (the same rule as the prefix).
    ///
    /// Copies into the slot being filled while the pieces follow each other; a full slot goes to the thread. Never
    /// blocks: with no slot free it keeps nothing, and the thread reads those bytes from the file. A piece that does
    /// not follow the one before drops the partial slot (its bytes are read from the file).
    func keep(_ bytes: UnsafeRawBufferPointer, at offset: Int64) {
        worker.keep(bytes, at: offset)
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

        /// The slots' memory, `slotCount` chunks. A slot is touched only by whoever holds it: the writer while it
        /// fills it (`filling`), the thread while it hashes it (taken out of `slots.full`); free and full slots are
        /// handed over under the `slots` lock, which also orders the copy before the hash.
        let slotCount: Int
        let slotMemory: SlotMemory
        let slots: Mutex<Slots>
        let filling = Mutex<Slot?>(nil)

        init(file: PartialFile, portableOnly: Bool, chunkSize: Int, slotCount: Int, hooks: Hooks) {
            self.file = file
            self.portableOnly = portableOnly
            self.chunkSize = chunkSize
            self.hooks = hooks
            self.slotCount = slotCount
            self.slotMemory = SlotMemory(byteCount: slotCount * chunkSize)
            self.slots = Mutex(Slots(free: Array((0..<slotCount).reversed())))
        }

        func keep(_ bytes: UnsafeRawBufferPointer, at offset: Int64) {
            guard slotCount > 0, !bytes.isEmpty, !cancelled.load(ordering: .relaxed) else { return }
            filling.withLock { filling in
                var rest = bytes
                var position = offset
                while let source = rest.baseAddress, !rest.isEmpty {
                    if let current = filling, current.end != position {
                        // Not the next piece: the partial slot's bytes are read from the file instead.
                        slots.withLock { $0.free.append(current.index) }
                        filling = nil
                    }
                    var current: Slot
                    if let filling {
                        current = filling
                    } else {
                        // None free: the thread is behind by every slot; it reads these bytes from the file.
                        guard let index = slots.withLock({ $0.free.popLast() }) else { return }
                        current = Slot(index: index, start: position, count: 0)
                    }
                    let count = min(chunkSize - current.count, rest.count)
                    (slotMemory.base + current.index * chunkSize + current.count)
                        .copyMemory(from: source, byteCount: count)
                    current.count += count
                    position += Int64(count)
                    rest = UnsafeRawBufferPointer(rebasing: rest[count...])
                    if current.count == chunkSize {
                        slots.withLock { $0.full.append(current) }
                        filling = nil
                    } else {
                        filling = current
                    }
                }
            }
        }

        /// Hands the slot being filled to the thread: the writer is done.
        private func publishPartialSlot() {
            filling.withLock { filling in
                guard let current = filling else { return }
                filling = nil
                slots.withLock { slots in
                    if current.count > 0 { slots.full.append(current) } else { slots.free.append(current.index) }
                }
            }
        }

        /// Where the bytes at `done` are: in a slot (now the thread's), or in the file up to the next slot's start.
        private func source(at done: Int64) -> Source {
            slots.withLock { slots in
                // Slots the file reads already passed are of no use any more.
                while let first = slots.full.first, first.end <= done {
                    slots.free.append(first.index)
                    slots.full.removeFirst()
                }
                guard let first = slots.full.first else { return .file(nextKept: nil) }
                guard first.start <= done else { return .file(nextKept: first.start) }
                slots.full.removeFirst()
                return .kept(first)
            }
        }

        /// Gives back a slot the thread hashed up to `done`: to the free ones, or, when part of it is left, to the
        /// front of the full ones.
        private func giveBack(_ slot: Slot, hashedUpTo done: Int64) {
            slots.withLock { slots in
                if done < slot.end { slots.full.insert(slot, at: 0) } else { slots.free.append(slot.index) }
            }
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
                publishPartialSlot()
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
                    let nextKept: Int64?
                    switch source(at: done) {
                    case .kept(let slot):
                        let skip = Int(done - slot.start)
                        let count = Int(min(Int64(slot.count - skip), target - done))
                        hooks.beforeHashingKept?(done, count)
                        hasher.update(
                            UnsafeRawBufferPointer(
                                start: slotMemory.base + slot.index * chunkSize + skip, count: count))
                        done += Int64(count)
                        hashed.store(done, ordering: .relaxed)
                        giveBack(slot, hashedUpTo: done)
                        continue
                    case .file(let next):
                        nextKept = next
                    }
                    // From the file, up to the next kept slot at most.
                    let count = Int(min(Int64(chunkSize), target - done, (nextKept ?? .max) - done))
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

    /// A slot's place in the file: `count` bytes from `start`, in slot `index`.
    fileprivate struct Slot: Sendable {
        var index: Int
        var start: Int64
        var count: Int
        var end: Int64 { start + Int64(count) }
    }

    fileprivate struct Slots: Sendable {
        var free: [Int]
        /// Filled slots in the order they were written, for the thread.
        var full: [Slot] = []
    }

    fileprivate enum Source {
        case kept(Slot)
        /// The file, up to `nextKept` (the start of the next slot) when there is one.
        case file(nextKept: Int64?)
    }

    /// Memory of a fixed size, released with its owner. Who may touch which part is the owner's protocol
    /// (``Worker``'s slots); this type only owns the allocation.
    fileprivate final class SlotMemory: @unchecked Sendable {
        let base: UnsafeMutableRawPointer

        init(byteCount: Int) {
            base = UnsafeMutableRawPointer.allocate(byteCount: max(byteCount, 1), alignment: 64)
        }

        deinit {
            base.deallocate()
        }
    }
}
