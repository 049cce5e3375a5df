import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Attacks on pieces in file order (``SegmentSchedule/Settings/pieceLength``) and on a segment whose answer ends
/// with it no longer being stopped (``SegmentSchedule/answerIsOver(connection:)``).
@Suite("Pieces under attack")
struct PieceAttackTests {
    static let path = Segmented.path
    static let total = Segmented.total
    static let piece: Int64 = 512 << 10

    /// Whether a download is over (any result), set from a task of its own, so that a test can wait for it with a
    /// deadline instead of awaiting it.
    final class Finished: Sendable {
        private let done = Atomic<Bool>(false)
        var value: Bool { done.load(ordering: .sequentiallyConsistent) }
        func set() { done.store(true, ordering: .sequentiallyConsistent) }
    }

    enum Variant: String, CaseIterable, CustomTestStringConvertible {
        /// `.fixed(2)`, no digest: even segments.
        case evenSegments
        /// `.fixed(4)` with an expected SHA-256: pieces in file order.
        case pieces
        var testDescription: String { rawValue }
    }

    /// A chunked 206 whose `Content-Range` ends before the range asked for, and whose body goes on past that end
    /// (the rest of the range asked for), held at a ``BodyGate`` 1000 bytes before the end `Content-Range` names,
    /// until every other byte is in the file, then held again right at that end.
    ///
    /// The rest of the range asked for is another connection's, fetched meanwhile. When the gate moves, the segment
    /// writes its last 1000 bytes, the last ones the file lacked: its "answer is over", so the engine no longer
    /// stops it, and waits for the transfer to end by itself; the phase only ends when a connection ends, and no
    /// other is left. Before these commits, the complete segment's transfer was stopped at its last byte and the
    /// download finished at once; now it waits for a server that sends nothing more, until the stall timeout (10 s
    /// by default, 600 s here) or the idle timeout: every byte is on disk and the download does not finish.
    @Test(
        "An over-long chunked 206 held after its Content-Range end does not keep a download with every byte from ending",
        arguments: Variant.allCases, TransportKind.all)
    func overlongAnswerHeldAfterItsEnd(variant: Variant, transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport, keepAlive: true)
        fixture.serve(.generated(length: Self.total, seed: 301))
        let expected = testBytes(count: Int(Self.total), seed: 301)
        // The segment held: the second half (fixed(2)), or the fourth piece.
        let start: Int64 = variant == .pieces ? 3 * Self.piece : Self.total / 2
        let claimed: Int64 = variant == .pieces ? Self.piece / 2 : Self.total / 4
        let gate = BodyGate(holdingAfter: claimed - 1000)
        defer { gate.open() }
        fixture.server.enqueue(
            behavior: Behavior(
                chunked: true, extraContentRange: "bytes \(start)-\(start + claimed - 1)/\(Self.total)", gate: gate),
            for: Self.path, whenRangeStartsAt: start)
        let events = EventLog()
        var configuration: DownloadTask.Configuration
        switch variant {
        case .evenSegments:
            configuration = Segmented.configuration(.fixed(2), events: events)
        case .pieces:
            configuration = Segmented.configuration(.fixed(4), events: events)
            configuration.hashingPieceLength = Self.piece
            var sha = PortableSHA256()
            sha.update(expected)
            configuration.expectedSHA256 = sha.hexDigest()
        }
        let task = try fixture.download(configuration: configuration)
        let finished = Finished()
        let waiter = Task {
            _ = await task.result
            finished.set()
        }
        try #require(await gate.waitUntilHeld(timeout: Waiting.deadline), "the server never held the body: \(gate)")
        let last = (start + claimed - 1000)..<(start + claimed)
        let written = try await waitUntil { fixture.temporaryFileHolds(expected, except: last) }
        try #require(written, "every byte but the held answer's last 1000 is written")
        // The held answer sends the last bytes its Content-Range names, and stops again at the gate. The stall
        // timeout is 600 s: the download has no reason to wait for the held answer any longer.
        gate.advance(by: 1000)
        let ended = try await waitUntil(timeout: .seconds(60)) { finished.value }
        let everyByteOnDisk = fixture.temporaryFileHolds(expected, except: 0..<0)
        #expect(
            ended,
            """
            the download did not end while the server held an answer past its Content-Range end \
            (every byte on disk: \(everyByteOnDisk); gate: \(gate))
            """)
        gate.open()
        await waiter.value
        let result = try await task.value
        #expect(try fixture.file(result.fileURL, holds: Self.total, seed: 301))
        #expect(events.segmentsFailed.isEmpty, "\(events.segmentsFailed)")
    }
}
