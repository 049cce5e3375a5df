import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Adversarial review of e12a167 and b98fe2f (a segment turned away costs that connection; with none left, back off).
@Suite("Segments turned away, attacked: the first answer alone carries the file (helper 61)")
struct SegmentRefusalFirstAnswerAttackTests {
    static let path = Segmented.path
    static let total = Segmented.total

    /// A server that answers the plain GET with the whole file (200) and turns away every range request with 403
    /// (hot-link rules, a CDN that refuses extra connections of one client). One connection finishes the file with
    /// that GET alone. With `.fixed(4)` the three segments are turned away while the first answer is read: the count
    /// comes down to that one answer, which carries the whole file, yet it is still stopped at its quarter, the
    /// request for the rest is turned away, and the download backs off and fails on the 403 of the next range
    /// request: "the connections already reading the file finish it" (SeveralConnections.md) does not hold.
    @Test(
        "Every range request turned away with 403, the first GET answered: the first answer alone finishes the file",
        arguments: [4, 2, 1], [false, true])
    func everyRangeForbidden(count: Int, pieces: Bool) async throws {
        let fixture = try DownloadFixture()
        fixture.serve(.generated(length: Self.total, seed: 61, behavior: Behavior(status: 403)))
        let gate = BodyGate(holdingAfter: 64 << 10)
        // The first request (the plain GET) is served; every other one is answered 403.
        fixture.server.enqueue(behavior: Behavior(gate: gate), for: Self.path)
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(count), events: events)
        if pieces {
            // A digest to check: the segments come a piece at a time, in file order.
            var digest = PortableSHA256()
            digest.update(testBytes(count: Int(Self.total), seed: 61))
            configuration.expectedSHA256 = digest.hexDigest()
        }
        let download = try fixture.download(configuration: configuration)
        defer { download.cancel() }
        #expect(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
        let others = count - 1
        #expect(try await waitUntil { events.segmentsFailed.count == others }, "\(events.segmentsFailed)")
        gate.open()
        switch await download.result {
        case .success(let result):
            #expect(try fixture.file(result.fileURL, holds: Self.total, seed: 61))
        case .failure(let error):
            let ranges = fixture.ranges()
            Issue.record(
                "the first answer carried the whole file and was the only connection left, yet the download failed: \(error); requests: \(ranges)"
            )
        }
    }

    /// helper-58's server (one connection per client: the three segments turned away, and the request for the rest
    /// too) with no retries: the refusal of the last connection used to end the download with that 403, a failure
    /// for good (exit 1), though the first answer carried the rest. The first answer now reads on past its share once
    /// the count came down to it, so the request for the rest is never made and the download finishes.
    @Test("No retries, every other connection turned away with 403: the first answer reads on and finishes the file")
    func refusedWithoutRetries() async throws {
        let fixture = try DownloadFixture()
        fixture.serve(.generated(length: Self.total, seed: 63))
        let gate = BodyGate(holdingAfter: 64 << 10)
        fixture.server.enqueue(behavior: Behavior(gate: gate), for: Self.path)
        for index in 1..<4 {
            fixture.server.enqueue(
                behavior: Behavior(status: 403), for: Self.path, whenRangeStartsAt: Segmented.start(index, of: 4))
        }
        fixture.server.enqueue(
            behavior: Behavior(status: 403), for: Self.path, whenRangeStartsAt: Segmented.start(1, of: 4))
        let events = EventLog()
        let download = try fixture.download(
            configuration: Segmented.configuration(.fixed(4), retries: 0, events: events))
        defer { download.cancel() }
        #expect(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
        #expect(try await waitUntil { events.segmentsFailed.count == 3 }, "\(events.segmentsFailed)")
        gate.open()
        let result = try await download.value
        #expect(try fixture.file(result.fileURL, holds: Self.total, seed: 63))
        #expect(fixture.rangeRequests().count == 3, "\(fixture.ranges())")
    }
}
