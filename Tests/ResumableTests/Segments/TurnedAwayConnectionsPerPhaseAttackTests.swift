import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Commit ecc9004 (6th round): a multi-connection phase that ends `.retry` is *one* attempt for the engine's limits
/// (``AttemptLimits/retrying(gained:missing:)``), and the segments the server turns away with a 503 cost it nothing
/// (they lower the count, ``SegmentSchedule`` does not count them as failures, and ``SegmentSchedule/joinedAnswers``
/// does not count them as answers). But every phase starts again at the configured count: with `.fixed(16)` each
/// phase is 16 requests. A hostile server that admits one connection per client (503 beyond it) and cuts each
/// admitted answer after 2 KiB four times in a row, then after 65 KiB once (the floor, which starts the engine's count
/// again), stays within the limits forever: 5 phases per 65 KiB, 80 requests while 16 segments of the minimum length
/// are missing. Measured: 1,150 requests (1,078 of them turned away) for the file's first MiB, where a server capping
/// its 206s at 4 KiB gets 256 and the same server with one connection gets ~72. A fix: the next phase starts at the
/// count the last one came down to (the server said how many it serves), not at the configured count again.
@Suite("Attack (6th round): turned-away connections make every phase cost the configured count of requests")
struct TurnedAwayConnectionsPerPhaseAttackTests {
    static let path = Segmented.path
    static let total: Int64 = 8 << 20
    static let mebibyte: Int64 = 1 << 20
    static let small: Int64 = 2 << 10
    static let big: Int64 = 65 << 10

    @Test("503 beyond one connection, four 2 KiB cuts then one 65 KiB cut: at most 512 requests per MiB")
    func turnedAwayConnectionsPerPhase() async throws {
        let fixture = try DownloadFixture()
        let seed: UInt64 = 7001
        fixture.serve(
            .generated(
                length: Self.total, seed: seed, behavior: Behavior(dropAfterBytes: Self.small),
                concurrencyLimit: ConcurrencyLimit(maximum: 1, retryAfter: "0")))
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(16), retries: 5, events: events)
        configuration.retry = .init(maximumRetries: 5, initialDelay: .milliseconds(1), maximumDelay: .milliseconds(1))
        configuration.deadline = .seconds(300)
        // The engine's n-th request (0-based): cut after 65 KiB when n % 5 == 4, else after 2 KiB; held after 1 KiB
        // until the phase's other segments were turned away.
        func behavior(_ n: Int, _ gate: BodyGate) -> Behavior {
            Behavior(dropAfterBytes: n % 5 == 4 ? Self.big : Self.small, gate: gate)
        }
        var n = 0
        var gate = BodyGate(holdingAfter: 1 << 10)
        fixture.server.enqueue(behavior: behavior(n, gate), for: Self.path)
        let task = try fixture.download(configuration: configuration)
        let finished = Mutex<Result<DownloadResult, ResumableError>?>(nil)
        let waiter = Task {
            let result = await task.result
            finished.withLock { $0 = result }
        }
        var started = 0
        for _ in 0..<2000 {
            try #require(try await waitUntil { gate.heldCount > 0 || finished.withLock { $0 != nil } })
            if finished.withLock({ $0 != nil }) { break }
            let start = fixture.server.requests(for: Self.path).last { !$0.wasOverloaded }?.rangeStart ?? 0
            // The file's first MiB is in: count what it cost.
            if start >= Self.mebibyte { break }
            // Only the first answer starts a phase: once the server pushed it down to one connection, the task opens no
            // more than that (DownloadEngine.State.connectionCeiling), so later answers run alone.
            if started == 0, Self.total - start >= 2 * Segmented.minimumSegment {
                try #require(
                    try await waitUntil {
                        let now = events.segmentsStarted.count
                        return now > started && events.segmentsFailed.count { $0.error.httpStatus == 503 } == now
                    })
                started = events.segmentsStarted.count
            }
            let held = gate
            n += 1
            gate = BodyGate(holdingAfter: 1 << 10)
            fixture.server.enqueue(behavior: behavior(n, gate), for: Self.path)
            held.open()
        }
        let requests = fixture.server.requests(for: Self.path).count
        #expect(events.segmentsStarted.count == started, "a later request started another phase")
        let turnedAway = fixture.server.requests(for: Self.path).count { $0.wasOverloaded }
        let outcome: String
        switch finished.withLock({ $0 }) {
        case .success?:
            outcome = "finished"
        case .failure(let error)?:
            outcome = "failed (\(error))"
        case nil:
            outcome = "still going with 1 MiB kept"
        }
        task.cancel()
        gate.open()
        await waiter.value
        // 512 requests for 1 MiB: twice what a server capping its 206s at 4 KiB gets.
        #expect(
            requests <= 512,
            "\(outcome) after \(requests) requests for the first MiB (\(turnedAway) turned away with 503, \(n + 1) admitted)"
        )
    }
}
