import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// A segment turned away with a status that says nothing about the file (a 403 from a server that allows fewer
/// connections, a 404 from an edge without the file, a redirect to a mirror) costs that connection, not the download:
/// the connections reading the file go on, and the download fails with the answer only when none is left.
@Suite("Segments turned away by the server")
struct SegmentRefusalTests {
    static let path = Segmented.path
    static let total = Segmented.total
    static let quarters = (0..<4).map { Segmented.start($0, of: 4) }

    @Test(
        "A server that answers 403 beyond two connections: fewer connections, the file is right",
        arguments: TransportKind.all)
    func forbiddenBeyondALimit(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        // Two answers are held at once (the first and one segment): the others asked meanwhile are turned away.
        let gate = BodyGate(holdingAfter: 64 << 10)
        fixture.serve(
            .generated(
                length: Self.total, seed: 41, behavior: Behavior(gate: gate),
                concurrencyLimit: ConcurrencyLimit(maximum: 2, status: 403)))
        let events = EventLog()
        let download = try fixture.download(configuration: Segmented.configuration(.fixed(4), events: events))
        defer { download.cancel() }
        #expect(try await waitUntil { fixture.server.overloadAnswers(for: Self.path) > 0 })
        gate.open()
        let result = try await download.value
        #expect(try fixture.file(result.fileURL, holds: Self.total, seed: 41))
        #expect(!result.restarted)
        let failed = events.segmentsFailed
        #expect(!failed.isEmpty)
        #expect(failed.allSatisfy { $0.error.httpStatus == 403 }, "\(failed.map(\.error))")
        #expect(fixture.server.peakConcurrentRequests(for: Self.path) <= 2)
        #expect(fixture.temporaryFiles().isEmpty)
    }

    @Test("Every segment answered 404 while the first answer is read: that answer alone finishes the file")
    func everySegmentNotFound() async throws {
        let fixture = try DownloadFixture()
        fixture.serve(.generated(length: Self.total, seed: 42))
        let gate = BodyGate(holdingAfter: 64 << 10)
        fixture.server.enqueue(behavior: Behavior(gate: gate), for: Self.path)
        for start in Self.quarters.dropFirst() {
            fixture.server.enqueue(behavior: Behavior(status: 404), for: Self.path, whenRangeStartsAt: start)
        }
        let events = EventLog()
        let download = try fixture.download(configuration: Segmented.configuration(.fixed(4), events: events))
        defer { download.cancel() }
        #expect(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
        // All three segments were turned away before the first answer goes on.
        #expect(try await waitUntil { events.segmentsFailed.count == 3 })
        gate.open()
        let result = try await download.value
        #expect(try fixture.file(result.fileURL, holds: Self.total, seed: 42))
        #expect(!result.restarted)
        #expect(events.segmentsFailed.allSatisfy { $0.error.httpStatus == 404 })
        #expect(fixture.temporaryFiles().isEmpty)
    }

    @Test("The schedule: a refused segment lowers the count; the last connection refused backs off")
    func refusalsLowerTheCountThenFail() {
        let basis = ResumeStateMachine.SegmentBasis(present: ByteRangeSet(), probe: 0..<(16 << 20), total: 16 << 20)
        let settings = SegmentSchedule.Settings(
            connections: .fixed(4), minimumSegmentLength: 1 << 20, stallTimeout: .seconds(5))
        var schedule = SegmentSchedule(basis: basis, settings: settings, probeConnection: 0)
        _ = schedule.start()
        let forbidden = ResumableError(.httpStatus, "403", httpStatus: 403)
        for id in 1...3 {
            let accepted = schedule.head(connection: id, verdict: .refused(forbidden))
            #expect(!accepted)
            let step = schedule.ended(connection: id, error: nil)
            #expect(step.end == nil, "refusal \(id) ended the phase")
            #expect(step.failure?.error.httpStatus == 403)
        }
        #expect(schedule.target == 1)
        // The first answer finishes its quarter; its successor asks for the rest, alone, and is refused too.
        _ = schedule.wrote(connection: 0, count: 4 << 20)
        let next = schedule.ended(connection: 0, error: nil)
        #expect(next.end == nil)
        guard case .request(let id, let range)? = next.actions.first, next.actions.count == 1 else {
            Issue.record("expected one request for the rest, got \(next.actions)")
            return
        }
        #expect(range.lowerBound == 4 << 20)
        let accepted = schedule.head(connection: id, verdict: .refused(forbidden))
        #expect(!accepted)
        let last = schedule.ended(connection: id, error: nil)
        // As after a 503: back off, then the next request is judged as any download's.
        guard case .retry(let error)? = last.end else {
            Issue.record("expected the phase to back off with the 403, got \(String(describing: last.end))")
            return
        }
        #expect(error.httpStatus == 403)
    }
}
