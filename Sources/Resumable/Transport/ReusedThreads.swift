import Foundation
import Synchronization

/// Threads for work that may block (a curl transfer, a flush to disk), kept for the next piece of work when one
/// ends.
///
/// ``run(_:)`` hands the work to an idle thread, or starts a new one when none is idle: work never waits for a
/// thread, so blocked work cannot hold back other work (the reason such work has threads of its own rather than a
/// dispatch queue, whose width on Linux is the number of cores). A thread whose work ended waits up to
/// ``idleTimeout`` for more and then ends; at most ``idleLimit`` wait at once.
///
/// Creating a thread and ending it cost about 100 µs of CPU on Linux (clone, the stack's mapping and guard page,
/// the TLS set-up, `madvise` of the stack when it ends, a TLB shootdown on every core): a batch of small files
/// made three per file (a transfer, finishing, ending), more CPU than parsing the responses.
final class ReusedThreads: Sendable {
    /// The threads of curl transfers.
    static let transfers = ReusedThreads(name: "Resumable.curl")
    /// The threads of work that blocks on the disk (``DownloadEngine/offThePool(_:)``).
    static let disk = ReusedThreads(name: "Resumable.disk")

    /// How long a thread waits for more work before it ends.
    static let idleTimeout: DispatchTimeInterval = .seconds(5)
    /// The most threads that wait for work at once; one more ends instead.
    static let idleLimit = 64

    /// A thread's next work: ``run(_:)`` puts it in `work` and signals `ready` (a new thread finds it there).
    private final class Waiter: Sendable {
        let ready = DispatchSemaphore(value: 0)
        let work = Mutex<(@Sendable () -> Void)?>(nil)
    }

    private let name: String
    /// The idle threads, the most recently idle last (it is taken first: its stack is likely still cached).
    private let idle = Mutex<[Waiter]>([])

    init(name: String) {
        self.name = name
    }

    /// Runs `work` on an idle thread, or on a new one.
    func run(_ work: @escaping @Sendable () -> Void) {
        if let waiter = idle.withLock({ $0.popLast() }) {
            waiter.work.withLock { $0 = work }
            waiter.ready.signal()
            return
        }
        // The thread's closure keeps only the slot, emptied when the work starts.
        let first = Waiter()
        first.work.withLock { $0 = work }
        let thread = Thread { [self] in loop(first: first) }
        thread.name = name
        thread.start()
    }

    /// A thread's life: its first work, then whatever ``run(_:)`` hands it while it waits.
    private func loop(first: Waiter) {
        var next: Waiter? = first
        while let waiter = next {
            Self.perform(waiter)
            next = waitForWork()
        }
    }

    /// Takes the waiter's work and runs it. The work, and everything it captured, is released when this returns:
    /// before the thread waits again (a waiting thread holding the last work's captures kept, for example, a task
    /// store locked after its queue was gone).
    private static func perform(_ waiter: Waiter) {
        let work = waiter.work.withLock { work in
            defer { work = nil }
            return work
        }
        work?()
    }

    /// Waits for work; the waiter holding it, or `nil` when none came within ``idleTimeout`` (or enough threads
    /// wait already).
    private func waitForWork() -> Waiter? {
        let waiter = Waiter()
        let parked = idle.withLock { idle in
            guard idle.count < Self.idleLimit else { return false }
            idle.append(waiter)
            return true
        }
        guard parked else { return nil }
        if waiter.ready.wait(timeout: .now() + Self.idleTimeout) == .timedOut {
            let removed = idle.withLock { idle in
                guard let index = idle.firstIndex(where: { $0 === waiter }) else { return false }
                idle.remove(at: index)
                return true
            }
            // Not taken meanwhile: end. Taken: `run` signals right after handing over the work.
            if removed { return nil }
            waiter.ready.wait()
        }
        return waiter
    }
}
