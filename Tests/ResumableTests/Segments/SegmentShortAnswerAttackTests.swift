import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Commits 6957774 and 26133fd bound a server that answers every range request with a one-byte `206`: on one
/// connection, ``AttemptLimits/askingAgain(gained:missing:asked:bodyEnded:)`` ends the download after
/// ``AttemptLimits/maximumFruitlessBodies`` such bodies (``TrickleServerTests``). In a multi-connection phase the same
/// answer is a *finished* segment: ``SegmentSchedule/head(connection:verdict:framedByLength:now:)`` moves the
/// connection's end to the `206`'s last byte, the body brings that byte, `ended` sees `next >= end` (no failure, no
/// floor), and `fill` gives the rest of the range to a new request, which gets one byte too. Nothing counts: the phase
/// asks a request per byte for as long as the file has bytes. The deadline bounds the test.
@Suite("Attack: one-byte 206s in a multi-connection phase")
struct SegmentShortAnswerAttackTests {
    static let total: Int64 = 8 << 20
    static let patience = Duration.seconds(120)

    @Test(
        "A server capping every 206 at one byte ends a multi-connection resume after a bounded number of requests",
        arguments: [DownloadTask.Connections.fixed(2), .fixed(4), .automatic])
    func oneByteRangesWithSegments(connections: DownloadTask.Connections) async throws {
        let fixture = try DownloadFixture()
        fixture.serve(.generated(length: Self.total, seed: 6504, behavior: Behavior(maxPartialLength: 1)))
        let token = try await fixture.interruptedToken(after: 1000)
        fixture.server.clearRequests()
        var configuration = Segmented.configuration(connections, retries: 3)
        configuration.deadline = Self.patience
        let task = try fixture.resumeThroughDisk(token, configuration: configuration)
        let error = try #require(await failure(of: task))
        let requests = fixture.server.requests(for: "/file.bin").count
        let offset = error.resumeToken.map { "\($0.offset) + \($0.completedRanges.map(\.count).reduce(0, +))" } ?? "-"
        // One connection stops after 11 such answers; allow a phase's worth of connections and failures, generously.
        #expect(
            error.code != .timedOut,
            "the deadline, not a limit, ended it after \(requests) one-byte answers (bytes kept \(offset)): \(error)")
        #expect(requests <= 200, "\(requests) requests, one byte each")
    }
}
