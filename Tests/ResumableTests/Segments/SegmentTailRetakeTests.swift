import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// The rest of the last connection, held while every other connection is done (`SegmentSchedule.retakeTail`): a
/// server that paces its answers in bursts (nginx under `limit_rate`) sends the bytes of an answer that goes on past
/// the segment's end only with the burst that carries them.
extension SegmentScheduleTests {
    /// Two connections over 3 MiB: the probe keeps [0, 1.5 MiB), connection 1 fetches the rest. Both bring a first byte
    /// at once (connection 1's request took 2 ms); at `by`, the probe lacks `probeRest` bytes of its segment and
    /// connection 1 `otherRest` of its own.
    func twoConnections(
        probeRest: Int64, otherRest: Int64 = 0, by: Duration, start: ContinuousClock.Instant
    ) -> SegmentSchedule {
        var schedule = schedule(total: 3 << 20, connections: .fixed(2), now: start)
        let split = Self.requests(schedule.start(now: start).actions)
        #expect(split == [1: (3 << 19)..<(3 << 20)])
        _ = schedule.wrote(connection: 0, count: 1, now: start + .milliseconds(1))
        _ = schedule.head(connection: 1, verdict: .join(end: 3 << 20), now: start + .milliseconds(2))
        _ = schedule.wrote(connection: 1, count: 1, now: start + .milliseconds(2))
        let probeComplete = schedule.wrote(connection: 0, count: Int((3 << 19) - probeRest) - 1, now: start + by)
        let otherComplete = schedule.wrote(connection: 1, count: Int((3 << 19) - otherRest) - 1, now: start + by)
        #expect(probeComplete == (probeRest == 0) && otherComplete == (otherRest == 0))
        return schedule
    }

    @Test("The probe's rest, silent past its pace while every other connection is done, is asked on a fresh connection")
    func heldTailIsRetaken() {
        let start = ContinuousClock.now
        let rest: Int64 = 40 << 10
        var schedule = twoConnections(probeRest: rest, by: .milliseconds(100), start: start)
        // At the probe's rate (1.46 MiB in 99 ms), its 40 KiB take under 3 ms: not behind when connection 1 ends, nor
        // 2 ms later.
        let ended = schedule.ended(connection: 1, error: nil, now: start + .milliseconds(100))
        #expect(ended.actions.isEmpty && ended.end == nil)
        let early = schedule.tick(now: start + .milliseconds(102))
        #expect(early.actions.isEmpty)
        // Silent for 5 ms: longer than its rest takes at its pace, and than a request. The probe is stopped, and its
        // rest asked as a range that ends where the rest ends.
        let retake = schedule.tick(now: start + .milliseconds(105))
        let restRange = ((3 << 19) - rest)..<Int64(3 << 19)
        #expect(retake.actions == [.stop(connection: 0), .request(connection: 2, range: restRange)])
        #expect(schedule.placement(connection: 0, count: 1) == nil, "the probe writes nothing more")
        // The probe's end and the newcomer's answer complete the file.
        let stopped = schedule.ended(connection: 0, error: ResumableError(.cancelled, "stopped"))
        #expect(stopped.end == nil && stopped.failure == nil)
        _ = schedule.head(connection: 2, verdict: .join(end: 3 << 19), now: start + .milliseconds(106))
        let restComplete = schedule.wrote(connection: 2, count: Int(rest), now: start + .milliseconds(106))
        #expect(restComplete)
        let end = schedule.ended(connection: 2, error: nil, now: start + .milliseconds(106)).end
        guard case .complete = end else {
            Issue.record("expected the phase to be complete, got \(String(describing: end))")
            return
        }
    }

    @Test("A retaken rest that falls silent in turn is not retaken again: its silence is a stall")
    func retakenTailIsNotRetakenAgain() {
        let start = ContinuousClock.now
        let rest: Int64 = 40 << 10
        var schedule = twoConnections(probeRest: rest, by: .milliseconds(100), start: start)
        _ = schedule.ended(connection: 1, error: nil, now: start + .milliseconds(100))
        let retake = schedule.tick(now: start + .milliseconds(105))
        #expect(Self.requests(retake.actions).count == 1)
        _ = schedule.ended(connection: 0, error: ResumableError(.cancelled, "stopped"))
        // The newcomer brings 8 KiB, then nothing: nothing happens until the stall timeout (5 s here).
        _ = schedule.head(connection: 2, verdict: .join(end: 3 << 19), now: start + .milliseconds(106))
        _ = schedule.wrote(connection: 2, count: 8 << 10, now: start + .milliseconds(106))
        for milliseconds in [120, 500, 2_000, 4_900] {
            let step = schedule.tick(now: start + .milliseconds(milliseconds))
            #expect(step.actions.isEmpty, "at \(milliseconds) ms")
        }
        let stall = schedule.tick(now: start + .milliseconds(5_200))
        #expect(stall.actions.contains(.stop(connection: 2)))
    }

    @Test("A slow connection whose rest takes longer than its silence at its own rate is left alone (a trickle)")
    func trickleIsNotRetaken() {
        let start = ContinuousClock.now
        // The probe brings all but 40 KiB of its segment over 10 s (150 KiB/s).
        var schedule = twoConnections(probeRest: 40 << 10, by: .seconds(10), start: start)
        _ = schedule.ended(connection: 1, error: nil, now: start + .seconds(10))
        // At 150 KiB/s its 40 KiB take 270 ms: 200 ms of silence is not behind its pace.
        let atPace = schedule.tick(now: start + .seconds(10) + .milliseconds(200))
        #expect(atPace.actions.isEmpty)
        // Past its pace, it is retaken.
        let behind = schedule.tick(now: start + .seconds(10) + .milliseconds(300))
        #expect(Self.requests(behind.actions).count == 1)
    }

    @Test("A range whose answer ends where it ends is not retaken: the server sends its last burst at once")
    func closedRangeIsNotRetaken() {
        let start = ContinuousClock.now
        // At 100 ms the probe is done, and connection 1, whose 206 ends where its range ends, lacks 40 KiB.
        var schedule = twoConnections(probeRest: 0, otherRest: 40 << 10, by: .milliseconds(100), start: start)
        let ended = schedule.ended(connection: 0, error: nil, now: start + .milliseconds(100))
        #expect(Self.requests(ended.actions).isEmpty)
        for milliseconds in [105, 200, 1_000, 4_000] {
            let step = schedule.tick(now: start + .milliseconds(milliseconds))
            #expect(step.actions.isEmpty, "at \(milliseconds) ms")
        }
    }
}

/// Without the rule, the held answer would wait for the stall timeout or the idle timeout (600 s in these tests): the
/// time limit is what fails.
@Suite("Multi-connection downloads: a held tail", .timeLimit(.minutes(5)))
struct SegmentTailRetakeTests {
    @Test(
        "The first answer held 20 KiB short of its segment's end, forever: its rest is asked again and the file completes",
        arguments: TransportKind.all)
    func heldProbeTail(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let seed: UInt64 = 7_411
        let resource = Resource.generated(length: Segmented.total, seed: seed)
        fixture.serve(resource)
        // The first answer (a 200 carrying the whole file) sends all but the last 20 KiB of its half, then holds: a
        // burst that never comes. The second half comes at once.
        let half = Segmented.total / 2
        let held = half - (20 << 10)
        let gate = BodyGate(holdingAfter: held)
        defer { gate.open() }
        fixture.server.enqueue(behavior: Behavior(gate: gate), for: Segmented.path)
        let events = EventLog()
        let task = try fixture.download(configuration: Segmented.configuration(.fixed(2), events: events))
        let result = try await task.value
        #expect(gate.arrivals == 1 && gate.limit == held, "the first answer was held, and never let go: \(gate)")
        // Stopped by the schedule, not failed by a timeout.
        #expect(events.segmentsFailed.isEmpty)
        // The rest from where the first answer stood (at `held` or, if a pause of its bytes on the way looked like the
        // held burst, a little before) to its segment's end.
        let retaken = events.segmentsStarted.map(\.range).filter { $0.upperBound == half && $0.lowerBound <= held }
        #expect(retaken.count == 1, "\(events.segmentsStarted)")
        #expect(try fixture.file(result.fileURL, holds: Segmented.total, seed: seed))
        #expect(!result.restarted)
        let asked = fixture.rangeRequests().compactMap { askedRange($0, total: Segmented.total) }
        #expect(
            asked.contains { $0 == retaken.first }, "the held rest was asked as a range ending where it ends: \(asked)")
        // Asked as every segment is (protocol rule 17b): a closed range under If-Range with the first answer's ETag.
        let etag = try #require(resource.etag)
        let retake = try #require(
            fixture.rangeRequests().first { askedRange($0, total: Segmented.total) == retaken.first })
        #expect(retake.closedByteRange != nil && retake.ifRange == etag, "\(retake)")
        #expect(fixture.server.requests(for: Segmented.path).filter { $0.range == nil }.count == 1)
        #expect(fixture.temporaryFiles().isEmpty)
    }
}
