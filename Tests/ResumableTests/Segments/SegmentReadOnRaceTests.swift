import Foundation
import Testing

@testable import Resumable

/// The read-on (``SegmentSchedule``'s `readOnIntoUnclaimedBytes`) against the engine's write path, found by helper 62.
///
/// The engine writes a segment's body in steps (``DownloadEngine``'s `receiveSegment`): `placement` under the lock
/// (cut at the connection's end), the write outside it, then `wrote` under the lock. The read-on can move the end
/// past the cut in between. The engine ended the transfer with `segmentComplete` whenever the placement was cut, and
/// `ended` took that error (code `cancelled`, not transient) for the download's failure. Now it ends the transfer
/// only when `wrote` says the range is complete, and otherwise writes the rest of the piece where `placement` puts it.
@Suite("Read-on into unclaimed bytes while a piece is being written")
struct SegmentReadOnRaceTests {
    /// The engine's rule after `wrote` (DownloadEngine+Receiving.swift, `receiveSegment`): whether the transfer is
    /// ended by throwing `segmentComplete`.
    static func engineEndsTransfer(
        _ schedule: inout SegmentSchedule, connection: Int, placed: Int, pieceCount: Int
    ) -> Bool {
        let complete = schedule.wrote(connection: connection, count: placed)
        let answerIsOver = complete && placed == pieceCount && schedule.answerIsOver(connection: connection)
        return complete && !answerIsOver
    }

    @Test(
        "A segment refused while the first answer writes a piece cut at its end: the rest of the piece is written where the read-on put the end, and the download goes on"
    )
    func readOnBetweenPlacementAndWrite() {
        let mebibyte: Int64 = 1 << 20
        let total = 8 * mebibyte
        let start = ContinuousClock.now
        let settings = SegmentSchedule.Settings(
            connections: .fixed(2), minimumSegmentLength: mebibyte, stallTimeout: .seconds(600))
        // The first answer: a 200 carrying the whole file (covers 0..<8 MiB), kept to its half.
        var schedule = SegmentSchedule(
            basis: .init(present: ByteRangeSet(), probe: 0..<total, total: total), settings: settings,
            probeConnection: 0, now: start)
        let started = schedule.start(now: start)
        #expect(started.actions == [.request(connection: 1, range: (4 * mebibyte)..<total)])
        // Connection 0 writes up to 1000 bytes before its end.
        #expect(schedule.placement(connection: 0, count: Int(4 * mebibyte - 1000))?.count == Int(4 * mebibyte - 1000))
        let firstWrote = schedule.wrote(connection: 0, count: Int(4 * mebibyte - 1000), now: start)
        #expect(!firstWrote)
        // Its next body piece (16 KiB from curl) runs past its end: the placement is cut at 1000 bytes.
        let body = 16 << 10
        let placement = schedule.placement(connection: 0, count: body)
        #expect(placement?.position == 4 * mebibyte - 1000)
        #expect(placement?.count == 1000)
        // Meanwhile (the write runs outside the lock) connection 1 is turned away with a 403: one connection
        // fewer, and connection 0's answer reads on into 4..8 MiB.
        let refused = ResumableError(.httpStatus, "the server answered 403 Forbidden to a segment", httpStatus: 403)
        let joined = schedule.head(connection: 1, verdict: .refused(refused), now: start)
        #expect(!joined)
        let refusedStep = schedule.ended(connection: 1, error: nil, now: start)
        #expect(refusedStep.end == nil)
        // The 1000 bytes are reported: the range is not complete any more, so the transfer goes on.
        let ends = Self.engineEndsTransfer(&schedule, connection: 0, placed: 1000, pieceCount: body)
        #expect(!ends, "the transfer was ended although its range grew")
        // The rest of the piece goes exactly after the 1000 bytes: the answer's next byte.
        let rest = schedule.placement(connection: 0, count: body - 1000)
        #expect(rest?.position == 4 * mebibyte)
        #expect(rest?.count == body - 1000)
        let restEnds = Self.engineEndsTransfer(&schedule, connection: 0, placed: body - 1000, pieceCount: body - 1000)
        #expect(!restEnds)
        // The first answer goes on to the end of the file: the phase completes without another request.
        let left = Int(total - 4 * mebibyte) - (body - 1000)
        #expect(schedule.placement(connection: 0, count: left)?.count == left)
        let last = schedule.wrote(connection: 0, count: left, now: start)
        #expect(last)
        guard case .complete? = schedule.ended(connection: 0, error: nil, now: start).end else {
            Issue.record("expected the phase to complete on the first answer alone")
            return
        }
    }
}
