import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Adversarial review of e12a167 (a segment turned away with 403/404/a redirect costs that connection only).
@Suite("Segments turned away, attacked: the last connection refused too")
struct SegmentRefusalAttackTests {
    static let path = Segmented.path
    static let total = Segmented.total

    /// A server that allows one connection per client and turns away the others (a file hoster's usual rule), and
    /// `.fixed(4)`: the three segments are turned away while the first answer is read; the first answer reads its
    /// quarter and is stopped there, and the connection that asks for the rest arrives before the server has seen
    /// the first one close: turned away too (a race seen with the URLSession transport against
    /// `ConcurrencyLimit(maximum: 1, status: 403)`; scripted here, one answer per segment). That connection was the
    /// last one: with 503 the download backs off and finishes from its quarter; with 403 it fails for good, though
    /// the server serves this client the file, one connection at a time, and the very next request would have been
    /// answered.
    @Test(
        "Turned away beyond one connection, the successor of the first answer too: a 403 must not fail the download",
        arguments: TransportKind.all, [403, 503])
    func turnedAwayBeyondOne(transport: TransportKind, status: Int) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.generated(length: Self.total, seed: 58))
        let gate = BodyGate(holdingAfter: 64 << 10)
        fixture.server.enqueue(behavior: Behavior(gate: gate), for: Self.path)
        for index in 1..<4 {
            fixture.server.enqueue(
                behavior: Behavior(status: status, retryAfter: status == 503 ? "0" : nil), for: Self.path,
                whenRangeStartsAt: Segmented.start(index, of: 4))
        }
        // The connection that asks for the rest once the first answer ends (at the second quarter).
        fixture.server.enqueue(
            behavior: Behavior(status: status, retryAfter: status == 503 ? "0" : nil), for: Self.path,
            whenRangeStartsAt: Segmented.start(1, of: 4))
        let events = EventLog()
        let download = try fixture.download(configuration: Segmented.configuration(.fixed(4), events: events))
        defer { download.cancel() }
        #expect(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
        #expect(try await waitUntil { events.segmentsFailed.count == 3 }, "\(events.segmentsFailed)")
        gate.open()
        let result = try await download.value
        #expect(try fixture.file(result.fileURL, holds: Self.total, seed: 58))
        // The first answer carries the whole file and reads on past its quarter once the count came down to it: the
        // request for the rest, which this server would turn away too, is never made.
        #expect(events.segmentsFailed.count == 3, "\(events.segmentsFailed.map(\.error))")
        #expect(fixture.rangeRequests().count == 3, "\(fixture.ranges())")
    }
}
