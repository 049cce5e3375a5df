import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Commit 6957774 made a byte no progress for the retry count, so that a server closing every connection after one
/// byte ends the download after the retries (``TrickleServerTests``). Those tests use a 1 MiB file, which runs on one
/// connection. A multi-connection phase (`.fixed(n)`, CLI `--connections n`; also `.automatic` once it ramped up to
/// several connections) has its own failure count, ``SegmentSchedule``'s `failuresInARow`, which every written byte sets back to 0: the
/// same server keeps the phase going, one request per byte, for as long as the file has bytes.
@Suite("Attack: a one-byte-per-connection server in a multi-connection phase")
struct SegmentTrickleAttackTests {
    static let total: Int64 = 8 << 20
    /// Bounds the old behaviour (a request per byte, without end); the fixed code ends in well under a second alone,
    /// and in tens of seconds at worst with the whole suite running on two cores.
    static let patience = Duration.seconds(120)

    @Test(
        "A server that closes every connection after one byte ends a multi-connection download after the retries",
        arguments: [DownloadTask.Connections.fixed(2), .fixed(4)])
    func oneByteThenCloseWithSegments(connections: DownloadTask.Connections) async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: Int(Self.total), seed: 64)
        fixture.serve(.bytes(content, behavior: Behavior(dropAfterBytes: 1)))
        var configuration = Segmented.configuration(connections, retries: 3)
        configuration.deadline = Self.patience
        let task = try fixture.download(configuration: configuration)
        let error = try #require(await failure(of: task))
        let requests = fixture.server.requests(for: "/file.bin").count
        // One connection gives up after 4 requests (TrickleServerTests); allow the phase's own 8 failures in a row per
        // retry, and more, generously.
        #expect(error.code != .timedOut, "the deadline, not the retries, ended it after \(requests) requests: \(error)")
        #expect(requests <= 200, "\(requests) requests, one byte each")
    }
}
