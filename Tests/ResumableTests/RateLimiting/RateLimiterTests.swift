import Foundation
import Synchronization
import Testing

@testable import Resumable

/// ``RateLimiter`` on real threads: waits are bounded below exactly, and above only generously.
@Suite("Rate limiter")
struct RateLimiterTests {
    /// Runs `waitForPermission` on a thread of its own, as a transport would.
    static func wait(
        _ limiter: RateLimiter, _ bytes: Int, stop: @escaping @Sendable () -> Bool = { false }
    ) async throws -> Duration {
        try await onOwnThread { limiter.waitForPermission(bytes, shouldStop: stop) }
    }

    @Test("The burst passes at once; what follows waits at least its cost")
    func waitsAtLeastTheCost() async throws {
        let limiter = RateLimiter(bytesPerSecond: 1_000_000)
        let clock = ContinuousClock()
        let start = clock.now
        #expect(try await Self.wait(limiter, 50_000) == .zero)
        _ = try await Self.wait(limiter, 100_000)
        // 150 kB at 1 MB/s, less the 50 kB burst, from before the first reservation.
        #expect(clock.now - start >= .milliseconds(100))
        #expect(limiter.statistics.waits == 1)
        #expect(limiter.statistics.waitsInsideSwiftTasks == 0)
        #expect(limiter.waitingCount == 0)
    }

    @Test("nil, zero and negative rates are unlimited")
    func unlimitedValues() async throws {
        for value in [nil, 0, -1, Int.min] as [Int?] {
            let limiter = RateLimiter(bytesPerSecond: value)
            #expect(limiter.bytesPerSecond == nil)
            #expect(try await Self.wait(limiter, Int.max) == .zero)
        }
        let limiter = RateLimiter(bytesPerSecond: 5)
        #expect(limiter.bytesPerSecond == 5)
        limiter.bytesPerSecond = 0
        #expect(limiter.bytesPerSecond == nil)
    }

    @Test("A stop request ends a wait of hours within a slice")
    func stopEndsTheWait() async throws {
        let limiter = RateLimiter(bytesPerSecond: 1)
        #expect(try await Self.wait(limiter, 16_384) == .zero)
        let stop = Atomic<Bool>(false)
        let calls = Atomic<Int>(0)
        let clock = ContinuousClock()
        let start = clock.now
        let waiter = Task {
            try await Self.wait(limiter, 1_000_000) {
                calls.add(1, ordering: .relaxed)
                return stop.load(ordering: .relaxed)
            }
        }
        // Stop only once the thread really waits (it asked at least once).
        #expect(try await waitUntil { calls.load(ordering: .relaxed) > 0 && limiter.waitingCount == 1 })
        stop.store(true, ordering: .relaxed)
        _ = try await waiter.value
        // 10^6 s without the stop; a loaded machine gets generous slack.
        #expect(clock.now - start < .seconds(300))
        #expect(limiter.waitingCount == 0)
    }

    @Test("Raising the rate lets a waiter go; lowering it never makes one wait longer")
    func rateChangesWhileWaiting() async throws {
        let clock = ContinuousClock()
        let limiter = RateLimiter(bytesPerSecond: 1)
        #expect(try await Self.wait(limiter, 16_384) == .zero)
        let start = clock.now
        let waiter = Task { try await Self.wait(limiter, 1_000_000) }
        #expect(try await waitUntil { limiter.waitingCount == 1 })
        limiter.bytesPerSecond = nil
        _ = try await waiter.value
        #expect(clock.now - start < .seconds(300), "a wait of 10^6 s at 1 B/s")

        // 10_000 B/s: 10_000 bytes beyond the 16 KiB burst wait 1 s from their reservation (one call, so however long
        // a busy machine takes to get there, the wait is still ahead); lowering the rate to 1 B/s meanwhile must not
        // make it 10_000 s.
        let lowered = RateLimiter(bytesPerSecond: 10_000)
        // The waiter's first look at `stop` happens inside its wait (reserved, deadline set): it stays there until
        // the rate was lowered, so the change always meets a waiting thread. Every wait here is bounded: a thread
        // left blocked would keep the test process from exiting.
        let inside = DispatchSemaphore(value: 0)
        let rateChanged = DispatchSemaphore(value: 0)
        let firstLook = Atomic<Bool>(true)
        let second = clock.now
        let slow = Task {
            try await Self.wait(lowered, 16_384 + 10_000) {
                if firstLook.exchange(false, ordering: .relaxed) {
                    inside.signal()
                    _ = rateChanged.wait(timeout: .now() + 120)
                }
                return false
            }
        }
        let entered = try await onOwnThread { inside.wait(timeout: .now() + 120) == .success }
        #expect(entered, "the waiter never looked at stop: it did not wait")
        #expect(lowered.waitingCount == 1)
        lowered.bytesPerSecond = 1
        rateChanged.signal()
        _ = try await slow.value
        #expect(clock.now - second >= .seconds(1))
        #expect(clock.now - second < .seconds(300))
        // The lower rate applies to what comes next: 2 bytes at 1 B/s on top of the backlog.
        #expect(lowered.bytesPerSecond == 1)
    }
}
