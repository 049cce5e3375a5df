import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Adversarial review of 64c245e (issue 10): failures that lower the count no longer count in a row, a segment
/// silent for twice the stall timeout beside receiving peers is a stall, and "lowering" follows the accepted head.
@Suite("Stalls and back-off under attack: the schedule")
struct StallAndBackOffScheduleAttackTests {
    static let mebibyte: Int64 = 1 << 20

    static func schedule(
        total: Int64, connections: DownloadTask.Connections, stall: Duration, now: ContinuousClock.Instant
    ) -> SegmentSchedule {
        let settings = SegmentSchedule.Settings(
            connections: connections, minimumSegmentLength: mebibyte, stallTimeout: stall)
        return SegmentSchedule(
            basis: .init(present: ByteRangeSet(), probe: 0..<total, total: total), settings: settings,
            probeConnection: 0, now: now)
    }

    static func requested(_ actions: [SegmentSchedule.Action]) -> [Int] {
        actions.compactMap { if case .request(let id, _) = $0 { id } else { nil } }
    }

    // MARK: - A 206 head, then nothing, while the first answer receives

    @Test(
        "Every range answered by a 206 head and an immediate close, beside a first answer that receives: the count comes down instead of asking again without end"
    )
    func acceptedThenClosedDoesNotLoop() {
        // fixed(2), 64 MiB: connection 0 (the first answer) receives 16 KiB between two events; every other
        // connection gets a 206 head the schedule accepts, then the server closes (a limit that cuts answers
        // instead of refusing them, a proxy dropping extra connections). Before 64c245e such a connection (no body
        // byte) lowered the count; now it only counts in a row, and connection 0's bytes reset that count.
        let start = ContinuousClock.now
        var now = start
        var schedule = Self.schedule(total: 64 * Self.mebibyte, connections: .fixed(2), stall: .seconds(10), now: now)
        var pending = Self.requested(schedule.start(now: now).actions)
        #expect(pending.count == 1)
        var opened = pending.count
        var ended: ResumeStateMachine.SegmentsEnd?
        var rounds = 0
        while let id = pending.first, ended == nil, rounds < 1000 {
            pending.removeFirst()
            rounds += 1
            now += .milliseconds(2)
            _ = schedule.wrote(connection: 0, count: 16 << 10, now: now)
            let end = schedule.requestedRange(connection: id)?.upperBound ?? 0
            let joined = schedule.head(connection: id, verdict: .join(end: end), now: now)
            #expect(joined)
            now += .milliseconds(1)
            let step = schedule.ended(
                connection: id, error: ResumableError(.incompleteBody, "the server closed after the head"), now: now)
            ended = step.end
            let again = Self.requested(step.actions)
            opened += again.count
            pending += again
        }
        // 1000 rounds are 3 s of simulated time and 16 MiB on connection 0, well inside its 32 MiB segment.
        #expect(
            opened <= SegmentSchedule.maximumFailuresInARow + 2,
            "\(opened) range requests, each answered by a head and a close, while the first answer received; target \(schedule.target)"
        )
    }

    // MARK: - Lowering while a stopped connection has not ended yet

    @Test(
        "503s while a stopped segment has not ended yet: lowering does not open a replacement for every refusal"
    )
    func overloadWhileAStopIsPending() {
        // fixed(3), 48 MiB, stall 1 s. Connection 1 is accepted and goes silent; connection 0 receives. After 2 s
        // the 2x rule stops 1; its transfer has not returned yet (the engine cancelled it). Meanwhile connection 2
        // and every replacement are refused with a 503. The doc says "no connection is opened beyond those still
        // working", but `target = min(target, connections.count)` counts the stopped connection 1.
        let start = ContinuousClock.now
        var now = start
        var schedule = Self.schedule(total: 48 * Self.mebibyte, connections: .fixed(3), stall: .seconds(1), now: now)
        let first = Self.requested(schedule.start(now: now).actions)
        #expect(first == [1, 2])
        _ = schedule.head(
            connection: 1, verdict: .join(end: schedule.requestedRange(connection: 1)!.upperBound), now: now)
        var stopped = false
        for _ in 0..<25 where !stopped {
            now += .milliseconds(100)
            _ = schedule.wrote(connection: 0, count: 64 << 10, now: now)
            stopped = schedule.tick(now: now).actions.contains(.stop(connection: 1))
        }
        #expect(stopped, "the 2x rule stops the silent connection 1")
        var pending = [2]
        var opened = 0
        var ended: ResumeStateMachine.SegmentsEnd?
        while let id = pending.first, ended == nil, opened < 100 {
            pending.removeFirst()
            let overloaded = ResumableError(.httpStatus, "503", httpStatus: 503)
            _ = schedule.head(connection: id, verdict: .overloaded(overloaded), now: now)
            let step = schedule.ended(connection: id, error: nil, now: now)
            ended = step.end
            let again = Self.requested(step.actions)
            opened += again.count
            pending += again
        }
        #expect(
            opened <= SegmentSchedule.maximumFailuresInARow + 1,
            "\(opened) replacements, each refused with a 503, before the stopped connection ended; target \(schedule.target)"
        )
    }
}

@Suite("Stalls and back-off under attack: end to end")
struct StallAndBackOffEndToEndAttackTests {
    @Test(
        "A server that cuts every range answer right after its 206 head, while the first answer streams: a bounded number of requests"
    )
    func rangeAnswersCutAfterTheHead() async throws {
        let fixture = try DownloadFixture()
        let total: Int64 = 4 << 20
        // Every answer is a head and a close, but the first one (the plain GET), which streams at 4 MiB/s.
        fixture.serve(.generated(length: total, seed: 301, behavior: Behavior(dropAfterBytes: 0)))
        fixture.server.enqueue(behavior: Behavior(throttleBytesPerSecond: 4 << 20), for: Segmented.path)
        let events = EventLog()
        let task = try fixture.download(configuration: Segmented.configuration(.fixed(2), retries: 3, events: events))
        let result = await task.result
        let ranges = fixture.rangeRequests()
        let cut = events.segmentsFailed
        #expect(
            ranges.count < 40,
            "\(ranges.count) range requests, \(cut.count) segments failed (\(Set(cut.map { "\($0.error.code)" }))); \(result)"
        )
    }

    @Test(
        "A server answering 503 to every range request forever, the first GET served: the download fails cleanly after a bounded number of requests, its token true"
    )
    func everyRangeRefused() async throws {
        let fixture = try DownloadFixture()
        let total = Segmented.total
        fixture.serve(.generated(length: total, seed: 303, behavior: Behavior(status: 503, retryAfter: "0")))
        fixture.server.enqueue(behavior: .normal, for: Segmented.path)
        let events = EventLog()
        let task = try fixture.download(configuration: Segmented.configuration(.fixed(16), retries: 3, events: events))
        let result = await task.result
        let requests = fixture.server.requests(for: Segmented.path)
        #expect(requests.count < 40, "\(requests.count) requests")
        guard case .failure(let error) = result else { return #expect(Bool(false), "finished against 503s: \(result)") }
        #expect(error.httpStatus == 503, "\(error)")
        let token = try #require(error.resumeToken)
        #expect(!token.presentRanges.isEmpty, "the first answer's bytes are kept")
        for range in token.presentRanges {
            try expectSameBytes(readBytes(of: token.tempPath, in: range), serverBytes(seed: 303, in: range), "\(range)")
        }
    }
}
