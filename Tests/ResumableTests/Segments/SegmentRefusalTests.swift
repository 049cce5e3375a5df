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

    @Test("The schedule: refused segments lower the count, and the first answer reads on into what they left")
    func refusalsLetTheFirstAnswerReadOn() {
        var schedule = Self.schedule(.fixed(4))
        _ = schedule.start()
        let forbidden = ResumableError(.httpStatus, "403", httpStatus: 403)
        for id in 1...3 {
            let accepted = schedule.head(connection: id, verdict: .refused(forbidden))
            #expect(!accepted)
            let step = schedule.ended(connection: id, error: nil)
            #expect(step.end == nil, "refusal \(id) ended the phase")
            #expect(step.failure?.error.httpStatus == 403)
            #expect(Self.requests(step.actions).isEmpty, "no newcomer after refusal \(id)")
        }
        #expect(schedule.target == 1)
        // The first answer (the whole file) was capped at its quarter; nobody else fetches the rest now: it reads on.
        #expect(schedule.placement(connection: 0, count: Int(16 << 20))?.count == Int(16 << 20))
        let complete = schedule.wrote(connection: 0, count: Int(16 << 20))
        #expect(complete)
        guard case .complete? = schedule.ended(connection: 0, error: nil).end else {
            Issue.record("expected the phase to be complete")
            return
        }
    }

    @Test("The schedule: the last connection refused, with no answer left to read on, backs off as after a 503")
    func lastRefusalBacksOff() {
        var schedule = Self.schedule(.fixed(2))
        _ = schedule.start()
        let forbidden = ResumableError(.httpStatus, "403", httpStatus: 403)
        // The first answer ends with its half; its successor steals half of what connection 1 has left.
        let half = schedule.wrote(connection: 0, count: Int(8 << 20))
        #expect(half)
        let next = Self.requests(schedule.ended(connection: 0, error: nil).actions)
        guard let (successor, range) = next.first else {
            Issue.record("expected a request for the rest, got \(next)")
            return
        }
        #expect(range == (12 << 20)..<(16 << 20))
        for id in [1, successor] {
            let accepted = schedule.head(connection: id, verdict: .refused(forbidden))
            #expect(!accepted)
        }
        let first = schedule.ended(connection: 1, error: nil)
        #expect(first.end == nil)
        guard case .retry(let error)? = schedule.ended(connection: successor, error: nil).end else {
            Issue.record("expected the phase to back off with the 403")
            return
        }
        #expect(error.httpStatus == 403)
    }

    static func schedule(_ connections: DownloadTask.Connections) -> SegmentSchedule {
        let basis = ResumeStateMachine.SegmentBasis(present: ByteRangeSet(), probe: 0..<(16 << 20), total: 16 << 20)
        let settings = SegmentSchedule.Settings(
            connections: connections, minimumSegmentLength: 1 << 20, stallTimeout: .seconds(5))
        return SegmentSchedule(basis: basis, settings: settings, probeConnection: 0)
    }

    static func requests(_ actions: [SegmentSchedule.Action]) -> [(Int, Range<Int64>)] {
        actions.compactMap { action in
            if case .request(let id, let range) = action { return (id, range) }
            return nil
        }
    }
}
