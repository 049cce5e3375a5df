import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Pieces in file order while a digest is computed (``SegmentSchedule/Settings/pieceLength``): the schedule's
/// decisions, pure, and a multi-connection download with an expected SHA-256 end to end.
@Suite("SegmentSchedule: pieces in file order")
struct SegmentPieceScheduleTests {
    static let mebibyte: Int64 = 1 << 20

    func schedule(
        total: Int64, connections: DownloadTask.Connections = .fixed(4), pieceLength: Int64?,
        now: ContinuousClock.Instant = .now
    ) -> SegmentSchedule {
        let basis = ResumeStateMachine.SegmentBasis(present: ByteRangeSet(), probe: 0..<total, total: total)
        let settings = SegmentSchedule.Settings(
            connections: connections, minimumSegmentLength: Self.mebibyte, stallTimeout: .seconds(5),
            pieceLength: pieceLength)
        return SegmentSchedule(basis: basis, settings: settings, probeConnection: 0, now: now)
    }

    /// Connection `id` receives all of `range` (its head, then every byte) and ends cleanly.
    static func finish(
        _ schedule: inout SegmentSchedule, _ id: Int, _ range: Range<Int64>, now: ContinuousClock.Instant = .now
    ) -> SegmentSchedule.Step {
        if id != 0 {
            let accepted = schedule.head(
                connection: id, verdict: .join(end: range.upperBound), framedByLength: true, now: now)
            #expect(accepted)
        }
        let complete = schedule.wrote(connection: id, count: Int(range.upperBound - range.lowerBound), now: now)
        #expect(complete)
        #expect(schedule.answerIsOver(connection: id) == (id != 0))
        return schedule.ended(connection: id, error: nil, now: now)
    }

    @Test("The first split caps every share, the first answer's included, at a piece, in file order")
    func firstSplitIsCapped() {
        let mib = Self.mebibyte
        var pieces = schedule(total: 64 * mib, pieceLength: 4 * mib)
        let expected: [Int: Range<Int64>] = [
            1: (4 * mib)..<(8 * mib), 2: (8 * mib)..<(12 * mib), 3: (12 * mib)..<(16 * mib),
        ]
        #expect(SegmentScheduleTests.requests(pieces.start().actions) == expected)
        #expect(pieces.placement(connection: 0, count: Int(64 * mib))?.count == Int(4 * mib))

        // Without pieces nothing changes: four even segments of 16 MiB.
        var even = schedule(total: 64 * mib, pieceLength: nil)
        let quarters: [Int: Range<Int64>] = [
            1: (16 * mib)..<(32 * mib), 2: (32 * mib)..<(48 * mib), 3: (48 * mib)..<(64 * mib),
        ]
        #expect(SegmentScheduleTests.requests(even.start().actions) == quarters)
        #expect(even.placement(connection: 0, count: Int(64 * mib))?.count == Int(16 * mib))
    }

    @Test("A connection that finished its piece takes the first piece nobody has or fetches; stealing is for the end")
    func piecesGoInOrder() {
        let mib = Self.mebibyte
        var schedule = schedule(total: 22 * mib, pieceLength: 4 * mib)
        var ranges = SegmentScheduleTests.requests(schedule.start().actions)
        #expect(ranges == [1: (4 * mib)..<(8 * mib), 2: (8 * mib)..<(12 * mib), 3: (12 * mib)..<(16 * mib)])
        // Connection 2 finishes first: the next piece is the first one left, [16, 20) MiB.
        var step = Self.finish(&schedule, 2, ranges[2]!)
        #expect(SegmentScheduleTests.requests(step.actions) == [4: (16 * mib)..<(20 * mib)])
        ranges.merge(SegmentScheduleTests.requests(step.actions)) { $1 }
        // The first answer stops at its piece; the rest of the file is 2 MiB, less than a piece plus a minimum segment:
        // taken whole.
        step = Self.finish(&schedule, 0, 0..<(4 * mib))
        #expect(SegmentScheduleTests.requests(step.actions) == [5: (20 * mib)..<(22 * mib)])
        // No gap is left: a connection that finished steals half of the largest remaining piece.
        let accepted = schedule.head(connection: 1, verdict: .join(end: 8 * mib))
        #expect(accepted)
        step = Self.finish(&schedule, 3, ranges[3]!)
        #expect(SegmentScheduleTests.requests(step.actions) == [6: (6 * mib)..<(8 * mib)])
        #expect(schedule.placement(connection: 1, count: Int(4 * mib))?.count == Int(2 * mib))
        #expect(step.end == nil)
    }

    @Test(
        "Only an answer framed by its Content-Length is left to end by itself; a chunked one, or the first, is stopped")
    func onlyFramedAnswersEndByThemselves() {
        let mib = Self.mebibyte
        var schedule = schedule(total: 16 * mib, pieceLength: 4 * mib)
        let ranges = SegmentScheduleTests.requests(schedule.start().actions)
        let framed = schedule.head(connection: 1, verdict: .join(end: ranges[1]!.upperBound), framedByLength: true)
        let chunked = schedule.head(connection: 2, verdict: .join(end: ranges[2]!.upperBound), framedByLength: false)
        #expect(framed && chunked)
        for id in [0, 1, 2] {
            let length = id == 0 ? 4 * mib : ranges[id]!.upperBound - ranges[id]!.lowerBound
            let complete = schedule.wrote(connection: id, count: Int(length))
            #expect(complete)
        }
        #expect(schedule.answerIsOver(connection: 1))
        #expect(!schedule.answerIsOver(connection: 2))
        #expect(!schedule.answerIsOver(connection: 0))
    }

    @Test("A connection that wrote all of its range is never a stalled one while its answer ends")
    func finishedConnectionIsNotStalled() {
        let mib = Self.mebibyte
        let start = ContinuousClock.now
        var schedule = schedule(total: 16 * mib, pieceLength: 4 * mib, now: start)
        let ranges = SegmentScheduleTests.requests(schedule.start(now: start).actions)
        let framed = schedule.head(
            connection: 1, verdict: .join(end: ranges[1]!.upperBound), framedByLength: true, now: start)
        #expect(framed)
        let complete = schedule.wrote(connection: 1, count: Int(4 * mib), now: start)
        #expect(complete && schedule.answerIsOver(connection: 1))
        // Its transfer has not ended yet (a busy machine, a rate limiter holding the last piece) while the others
        // keep receiving, long past the stall timeout (5 s here): it is not stopped as stalled.
        for id in [0, 2, 3] {
            if id != 0 {
                _ = schedule.head(connection: id, verdict: .join(end: ranges[id]!.upperBound), now: start)
            }
            _ = schedule.wrote(connection: id, count: Int(mib), now: start + .seconds(11))
        }
        let step = schedule.tick(now: start + .seconds(12))
        #expect(!step.actions.contains(.stop(connection: 1)), "\(step.actions)")
    }

    @Test("Without pieces a connection that finished takes the whole gap left, as before")
    func withoutPiecesTheGapIsTakenWhole() {
        let mib = Self.mebibyte
        var schedule = schedule(total: 64 * mib, connections: .fixed(2), pieceLength: nil)
        let first = SegmentScheduleTests.requests(schedule.start().actions)
        #expect(first == [1: (32 * mib)..<(64 * mib)])
        // Connection 1 is cut after 1 MiB: without pieces the next connection asks for all the 31 MiB it left.
        _ = schedule.head(connection: 1, verdict: .join(end: 64 * mib))
        _ = schedule.wrote(connection: 1, count: Int(mib))
        let step = schedule.ended(connection: 1, error: ResumableError(.network, "reset"))
        #expect(SegmentScheduleTests.requests(step.actions) == [2: (33 * mib)..<(64 * mib)])
    }

    @Test("A gap left by a stopped piece is taken first, at most a piece of it")
    func gapsBeforeNewPieces() {
        let mib = Self.mebibyte
        var schedule = schedule(total: 64 * mib, connections: .fixed(2), pieceLength: 4 * mib)
        let first = SegmentScheduleTests.requests(schedule.start().actions)
        #expect(first == [1: (4 * mib)..<(8 * mib)])
        _ = schedule.head(connection: 1, verdict: .join(end: 8 * mib))
        _ = schedule.wrote(connection: 1, count: Int(mib))
        // Connection 1 is cut after 1 MiB; the file's first gap starts with the rest of its piece, and the next
        // connection asks a piece from there.
        let step = schedule.ended(connection: 1, error: ResumableError(.network, "reset"))
        #expect(step.failure?.remaining == (5 * mib)..<(8 * mib))
        #expect(SegmentScheduleTests.requests(step.actions) == [2: (5 * mib)..<(9 * mib)])
        let next = Self.finish(&schedule, 2, (5 * mib)..<(9 * mib))
        #expect(SegmentScheduleTests.requests(next.actions) == [3: (9 * mib)..<(13 * mib)])
    }

    @Test("The automatic count goes on measuring while a connection is between two pieces")
    func rampAcrossPieces() {
        let start = ContinuousClock.now
        var schedule = schedule(total: 256 << 20, connections: .automatic, pieceLength: 2 * Self.mebibyte, now: start)
        _ = schedule.start(now: start)
        _ = schedule.wrote(connection: 0, count: 512 << 10, now: start)
        #expect(schedule.tick(now: start).actions.isEmpty)
        _ = schedule.wrote(connection: 0, count: 1 << 20, now: start + .milliseconds(100))
        let four = SegmentScheduleTests.requests(schedule.tick(now: start + .milliseconds(100)).actions)
        #expect(four.count == 3 && schedule.target == 4)
        // The probe kept a piece; so did each newcomer.
        #expect(four.values.allSatisfy { $0.upperBound - $0.lowerBound == 2 * Self.mebibyte })
        for (id, range) in four {
            _ = schedule.head(connection: id, verdict: .join(end: range.upperBound), now: start + .milliseconds(100))
        }
        _ = schedule.tick(now: start + .milliseconds(110))  // every connection receives: the window starts
        // One connection finishes its piece and asks for the next; its answer has not come yet at the next ticks.
        let (id, range) = four.min { $0.key < $1.key }!
        let next = SegmentScheduleTests.requests(
            Self.finish(&schedule, id, range, now: start + .milliseconds(140)).actions)
        #expect(next.count == 1)
        #expect(schedule.tick(now: start + .milliseconds(140)).actions.isEmpty)
        // Four times the rate of one: the window that began before the piece ended decides, and goes to the most.
        for id in [0] + four.keys.filter({ $0 != id }) {
            _ = schedule.wrote(connection: id, count: 1 << 20, now: start + .milliseconds(200))
        }
        let more = SegmentScheduleTests.requests(schedule.tick(now: start + .milliseconds(210)).actions)
        #expect(schedule.target == 16)
        #expect(more.count == 12)
        // Still in file order, a piece each, right after what the four have.
        let starts = more.values.map(\.lowerBound).sorted()
        let front = next.values.first!.upperBound
        #expect(starts == (0..<12).map { front + Int64($0) * 2 * Self.mebibyte })
    }
}

extension SegmentPieceScheduleTests {
    @Test("Once the automatic count is back at one connection, it takes the rest of the file whole, not a piece")
    func oneConnectionTakesTheRestWhole() {
        let mib = Self.mebibyte
        let start = ContinuousClock.now
        var schedule = schedule(total: 256 * mib, connections: .automatic, pieceLength: 8 * mib, now: start)
        _ = schedule.start(now: start)
        _ = schedule.wrote(connection: 0, count: 512 << 10, now: start)
        #expect(schedule.tick(now: start).actions.isEmpty)
        // One connection: 1 MiB in 100 ms.
        _ = schedule.wrote(connection: 0, count: 1 << 20, now: start + .milliseconds(100))
        let four = SegmentScheduleTests.requests(schedule.tick(now: start + .milliseconds(100)).actions)
        // The first connection keeps a piece from where it is (1.5 MiB), each newcomer takes the next.
        let front = 3 * mib / 2 + 8 * mib
        #expect(
            four == [
                1: front..<(front + 8 * mib), 2: (front + 8 * mib)..<(front + 16 * mib),
                3: (front + 16 * mib)..<(front + 24 * mib),
            ])
        for (id, range) in four {
            _ = schedule.head(connection: id, verdict: .join(end: range.upperBound), now: start + .milliseconds(100))
        }
        _ = schedule.tick(now: start + .milliseconds(110))  // every connection receives: the window starts
        // Four connections: 2.1 MiB in 190 ms, less than a fifth more than one brought. Back to one; the newest three
        // stop.
        _ = schedule.wrote(connection: 0, count: Int(21 * mib / 10), now: start + .milliseconds(300))
        let back = schedule.tick(now: start + .milliseconds(300)).actions
        #expect(schedule.target == 1)
        #expect(
            back.sorted { "\($0)" < "\($1)" } == [.stop(connection: 1), .stop(connection: 2), .stop(connection: 3)])
        for id in four.keys { _ = schedule.ended(connection: id, error: nil, now: start + .milliseconds(310)) }
        // The first connection ends its piece; the next request is the rest of the file, whole.
        let left = schedule.placement(connection: 0, count: Int(8 * mib))?.count ?? 0
        let complete = schedule.wrote(connection: 0, count: left, now: start + .milliseconds(320))
        #expect(complete)
        let next = SegmentScheduleTests.requests(schedule.ended(connection: 0, error: nil).actions)
        #expect(next.values.map { $0 } == [front..<(256 * mib)])
    }
}

/// A multi-connection download with an expected SHA-256 end to end: pieces in file order, over kept-alive
/// connections, and the digest checked.
@Suite("Multi-connection downloads: pieces while hashing")
struct SegmentPieceDownloadTests {
    static let path = Segmented.path
    static let total = Segmented.total
    /// 512 KiB pieces: sixteen of them in the 8 MiB file.
    static let piece: Int64 = 512 << 10

    /// The SHA-256 of the generated file of `seed`.
    static func digest(seed: UInt64) throws -> String {
        try SHA256Hasher.hex(of: testBytes(count: Int(total), seed: seed))
    }

    static func configuration(_ digest: String, events: EventLog? = nil) -> DownloadTask.Configuration {
        var configuration = Segmented.configuration(.fixed(4), events: events)
        configuration.hashingPieceLength = piece
        configuration.expectedSHA256 = digest
        return configuration
    }

    @Test(
        "fixed(4) with an expected SHA-256: the file is asked in pieces in file order, over kept-alive connections",
        arguments: TransportKind.all)
    func piecesInOrder(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport, keepAlive: true)
        fixture.serve(.generated(length: Self.total, seed: 91))
        let digest = try Self.digest(seed: 91)
        let events = EventLog()
        let result = try await fixture.download(configuration: Self.configuration(digest, events: events)).value

        #expect(result.sha256 == digest)
        #expect(try fixture.file(result.fileURL, holds: Self.total, seed: 91))
        // Every piece after the first answer's, in order, each asked once before anything is stolen at the end.
        let pieces = (1..<Int(Self.total / Self.piece)).map { Int64($0) * Self.piece..<(Int64($0) + 1) * Self.piece }
        let started = events.segmentsStarted.map(\.range)
        #expect(Array(started.prefix(pieces.count)) == pieces, "\(started)")
        #expect(events.segmentsFailed.isEmpty)
        let requests = fixture.rangeRequests()
        // Requests started together may reach the server in another order.
        let asked = requests.compactMap { askedRange($0, total: Self.total) }
        let order = { (a: Range<Int64>, b: Range<Int64>) in (a.lowerBound, a.upperBound) < (b.lowerBound, b.upperBound)
        }
        #expect(asked.sorted(by: order) == started.sorted(by: order), "each piece is a bytes=a-b of its own")
        if transport == .libcurl {
            // A piece's answer ends with it: its connection serves a later piece. Only a transfer stopped before its
            // answer ended loses its connection: the first answer (asked for the whole file, stopped after its piece)
            // and each one another connection stole from at the end. Four connections, plus one per stop at most.
            let stops = 1 + started.count { !pieces.contains($0) }
            let connections = Set(fixture.server.requests(for: Self.path).map(\.connection))
            #expect(connections.count <= 4 + stops, "\(requests.map { ($0.connection, $0.range ?? "") })")
        }
        #expect(fixture.temporaryFiles().isEmpty)
    }

    @Test(
        "Paused while one piece is held, the token lists exactly the bytes in the file; the resume's digest is right",
        arguments: TransportKind.all)
    func pauseWhilePieceHeld(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport, keepAlive: true)
        fixture.serve(.generated(length: Self.total, seed: 93))
        let digest = try Self.digest(seed: 93)
        // The fourth piece is held after 10,000 bytes; the other connections go on with the later pieces, and less
        // than two minimum segments are left to steal from it.
        let held = (3 * Self.piece)..<(4 * Self.piece)
        let gate = BodyGate(holdingAfter: 10_000)
        defer { gate.open() }
        fixture.server.enqueue(behavior: Behavior(gate: gate), for: Self.path, whenRangeStartsAt: held.lowerBound)
        let task = try fixture.download(configuration: Self.configuration(digest))
        #expect(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
        let hole = (held.lowerBound + 10_000)..<held.upperBound
        let expected = testBytes(count: Int(Self.total), seed: 93)
        let written = try await waitUntil { fixture.temporaryFileHolds(expected, except: hole) }
        try #require(written, "every byte but the held piece's rest is written")
        let token = try #require(await task.cancelProducingResumeData())
        // Everything but the held rest, or, when the end game split that rest meanwhile (a connection that finished
        // takes the second half of a slow segment: SegmentSchedule.takeEndgameWork), everything but its first part
        // and what the newcomer has yet to bring; either way only bytes that are in the file.
        let present = token.presentRanges
        #expect(present.first == 0..<hole.lowerBound, "\(present)")
        #expect(present.dropFirst().allSatisfy { $0.lowerBound > hole.lowerBound }, "\(present)")
        #expect(
            present.contains { $0.lowerBound <= hole.upperBound && $0.upperBound == Self.total }, "\(present)")
        for range in present {
            try expectSameBytes(readBytes(of: token.tempPath, in: range), serverBytes(seed: 93, in: range), "\(range)")
        }
        #expect(token.expectedSHA256 == digest)

        var configuration = Segmented.configuration(.fixed(4))
        configuration.hashingPieceLength = Self.piece
        let result = try await fixture.resumeThroughDisk(token, configuration: configuration).value
        #expect(result.sha256 == digest)
        #expect(try fixture.file(result.fileURL, holds: Self.total, seed: 93))
    }

    @Test("fixed(4) in pieces with a wrong expected SHA-256 fails, and keeps nothing")
    func wrongDigestFails() async throws {
        let fixture = try DownloadFixture(keepAlive: true)
        fixture.serve(.generated(length: Self.total, seed: 92))
        let events = EventLog()
        let task = try fixture.download(
            configuration: Self.configuration(String(repeating: "0", count: 64), events: events))
        let error = try #require(await failure(of: task))
        #expect(error.code == .checksumMismatch)
        #expect(error.resumeToken == nil)
        #expect(events.segmentsStarted.first?.range == Self.piece..<(2 * Self.piece), "asked in pieces")
        #expect(fixture.temporaryFiles().isEmpty)
        #expect(fixture.directory.contents().isEmpty)
    }
}
