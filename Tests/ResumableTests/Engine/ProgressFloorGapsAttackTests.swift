import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Commit 6957774: an answer brings the file "further" only by at least `progressFloor` bytes (64 KiB, or a sixteenth
/// of a smaller file); more than ``AttemptLimits/maximumFruitlessBodies`` bodies in a row below it end the download
/// with `protocolViolation`. But a version 2 token is resumed on one connection (`.single`, and `.automatic` — the
/// CLI's default — while less than 16 MiB is missing) one gap at a time: each gap's `206` is a whole, correct body
/// that ends where the next completed range begins, and it is asked again for the next gap. A token whose gaps are
/// smaller than the floor (segments paused near their ends, ranges a token dropped) makes a correct server's correct
/// answers "fruitless", and the resume fails after eleven gaps.
@Suite("Attack: the progress floor against a version 2 token with small gaps")
struct ProgressFloorGapsAttackTests {
    static let total: Int64 = 8 << 20
    static let gapCount = 20

    /// A version 2 token of a real interrupted download (64 KiB prefix) with ``gapCount`` completed ranges of 1 KiB
    /// after it, each 1 KiB after the previous one, all holding the server's bytes.
    func tokenWithSmallGaps(_ fixture: DownloadFixture, seed: UInt64) async throws -> ResumeToken {
        fixture.serve(.generated(length: Self.total, seed: seed))
        let base = try await fixture.interruptedToken(after: 64 << 10)
        let ranges = (0..<Int64(Self.gapCount)).map { index -> Range<Int64> in
            let start = base.offset + 1024 + index * 2048
            return start..<(start + 1024)
        }
        let token = try base.listing(ranges, length: Self.total, seed: seed)
        return try ResumeToken(jsonData: token.jsonData())
    }

    @Test(
        "A correct server finishes a version 2 token with twenty 1 KiB gaps, on one connection",
        arguments: [DownloadTask.Connections.single, .automatic])
    func smallGapsFinish(connections: DownloadTask.Connections) async throws {
        let fixture = try DownloadFixture()
        let seed: UInt64 = 6401
        let token = try await tokenWithSmallGaps(fixture, seed: seed)
        fixture.server.clearRequests()
        var configuration = DownloadFixture.configuration(retries: 5)
        configuration.connections = connections
        let result = try await fixture.resumeThroughDisk(token, configuration: configuration).result
        let requests = fixture.server.requests(for: "/file.bin").count
        switch result {
        case .success(let done):
            #expect(try fixture.file(done.fileURL, holds: Self.total, seed: seed))
        case .failure(let error):
            Issue.record(
                "a correct server's answers to the token's gaps ended the resume after \(requests) requests: \(error)")
        }
    }
}
