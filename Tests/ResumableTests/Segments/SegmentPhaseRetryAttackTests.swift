import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Commit 93cecfe: the failed attempts' bytes add up in ``AttemptLimits/retrying(gained:missing:)``, and a
/// multi-connection phase that ends `.retry` is *one* attempt whose gain is every byte all its connections wrote. A
/// phase takes ``SegmentSchedule/maximumFailuresInARow`` + 1 failed segments before it ends, each one a request, plus
/// the connections opened at its start. So a server that cuts every connection after 2000 bytes (one connection: the
/// download fails after 6 requests, as designed: 2000 bytes a failure never add up to 64 KiB in 5) brings each phase
/// ~24 kB with four connections, three phases add up to the floor, the engine's count starts again, and the download
/// crawls on at one request per 2000 bytes for as long as a multi-connection phase is worthwhile (6 of 8 MiB here):
/// thousands of requests. The per-phase floor (64 KiB since the schedule's last reset) never resets in a phase,
/// but the phase's end resets it for the next one.
@Suite("Attack: multi-connection phases that end .retry add up to the floor")
struct SegmentPhaseRetryAttackTests {
    static let total: Int64 = 8 << 20
    static let patience = Duration.seconds(300)

    @Test(
        "A server that cuts every connection after 2000 bytes gets a bounded number of requests with several connections",
        arguments: [DownloadTask.Connections.single, .fixed(4), .fixed(16)])
    func cutsAfter2000Bytes(connections: DownloadTask.Connections) async throws {
        let fixture = try DownloadFixture()
        fixture.serve(.generated(length: Self.total, seed: 6702, behavior: Behavior(dropAfterBytes: 2000)))
        var configuration = DownloadFixture.configuration(retries: 5)
        configuration.retry = .init(maximumRetries: 5, initialDelay: .milliseconds(1), maximumDelay: .milliseconds(1))
        configuration.connections = connections
        configuration.deadline = Self.patience
        let task = try fixture.download(configuration: configuration)
        let result = await task.result
        let requests = fixture.server.requests(for: "/file.bin").count
        // At 2000 bytes an answer, 1024 requests bring 2 MB of 8 MiB: a bound far above a floor of 64 KiB per five
        // failures (one connection stops after 6).
        switch result {
        case .success:
            Issue.record("finished through 2000-byte cuts after \(requests) requests")
        case .failure(let error):
            #expect(error.code != .timedOut, "the deadline ended it after \(requests) requests: \(error)")
            let kept =
                error.resumeToken.map {
                    $0.offset + $0.completedRanges.reduce(Int64(0)) { $0 + $1.upperBound - $1.lowerBound }
                } ?? -1
            let message = "failed only after \(requests) requests, \(kept) bytes kept: \(error)"
            #expect(requests <= 1024, "\(message)")
        }
    }
}
