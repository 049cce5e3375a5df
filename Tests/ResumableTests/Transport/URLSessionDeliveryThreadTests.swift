import Foundation
import Synchronization
import Testing

@testable import Resumable

/// The URLSession transport's delegate callbacks (the response head, the body) do not wait for the global thread
/// pool (``URLSessionDeliveryQueue``, Linux only).
///
/// On Linux, an `OperationQueue` runs its operations on a concurrent queue of the global default-QoS pool, which is
/// also Swift concurrency's executor and adds no thread while as many as there are cores are running: busy tasks
/// kept a response head from its consumer for as long as they ran, on a loaded machine long enough for the connect
/// timeout to fail the request.
///
/// Deterministic: as many busy loops as there are cores hold every thread of that pool (the pool adds none while
/// they run) until the callback has run or a deadline passes; the callback must run before the deadline.
@Suite("URLSession delivery thread")
struct URLSessionDeliveryThreadTests {
    #if canImport(FoundationNetworking)
        /// What the busy loops and the callback share.
        final class Shared: Sendable {
            let started = Atomic<Int>(0)
            let callbackRan = Atomic<Bool>(false)
            let stop = Atomic<Bool>(false)
        }

        @Test("A delegate callback runs while busy work holds every thread of the global pool")
        func callbackRunsWhileThePoolIsBusy() async throws {
            let outcome = try await onOwnThread { () -> (started: Bool, ranInTime: Bool) in
                let shared = Shared()
                let clock = ContinuousClock()
                // Long enough that only a callback waiting for a pool thread reaches it; the loops end then anyway.
                let deadline = clock.now + .seconds(20)
                let loops = DispatchGroup()
                let cores = max(ProcessInfo.processInfo.activeProcessorCount, 1)
                for _ in 0..<cores {
                    DispatchQueue.global().async(group: loops) {
                        shared.started.add(1, ordering: .relaxed)
                        while !shared.stop.load(ordering: .relaxed) && clock.now < deadline {}
                    }
                }
                // Other tests may hold pool threads for a while: wait (on this thread, not the pool) until every loop
                // runs.
                let startDeadline = clock.now + Waiting.deadline
                while shared.started.load(ordering: .relaxed) < cores && clock.now < startDeadline {
                    usleep(1_000)
                }
                let started = shared.started.load(ordering: .relaxed) == cores

                let queue = URLSessionDeliveryQueue(limits: .default)
                let ran = DispatchSemaphore(value: 0)
                queue.addOperation {
                    shared.callbackRan.store(clock.now < deadline, ordering: .relaxed)
                    shared.stop.store(true, ordering: .relaxed)
                    ran.signal()
                }
                ran.wait()
                shared.stop.store(true, ordering: .relaxed)
                loops.wait()
                return (started, shared.callbackRan.load(ordering: .relaxed))
            }
            #expect(outcome.started, "the busy loops never all ran: the pool was not saturated")
            #expect(outcome.ranInTime, "the callback waited for the busy loops to end")
        }
    #endif
}
