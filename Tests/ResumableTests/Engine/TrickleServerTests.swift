import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Servers that bring a file forward a byte at a time, answer after answer: before, every byte counted as progress and
/// started the retry count again, so such a server kept a download going for as long as the file had bytes (one
/// stall per byte), and never made it fail. A deadline bounds each test, so that the old behaviour ends in a
/// failure of the test instead of a hang.
@Suite("Servers that trickle a byte per answer")
struct TrickleServerTests {
    static let length = 1 << 20
    static let patience = Duration.seconds(120)

    func configuration(retries: Int) -> DownloadTask.Configuration {
        var configuration = DownloadFixture.configuration(retries: retries)
        configuration.deadline = Self.patience
        return configuration
    }

    @Test(
        "A server that closes every connection after one byte: the download fails after the retries, bytes kept",
        arguments: TransportKind.all)
    func oneByteThenClose(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: Self.length, seed: 11)
        fixture.serve(.bytes(content, behavior: Behavior(dropAfterBytes: 1)))
        let task = try fixture.download(configuration: configuration(retries: 3), transport: transport)
        let error = try #require(await failure(of: task))
        #expect(error.code != .timedOut, "the deadline, not the retries, ended it: \(error)")
        #expect(error.isTransient, "\(error)")
        // The first request and three retries, each a byte further.
        #expect(fixture.server.requests(for: "/file.bin").count == 4)
        let token = try #require(error.resumeToken)
        #expect(token.offset == 4)
        try expectSameBytes(readBytes(of: token.tempPath, in: 0..<4), Data(content[0..<4]))
    }

    @Test(
        "A server that answers every range request with a one-byte 206: the download ends after the fruitless bodies",
        arguments: TransportKind.all)
    func oneByteRanges(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: Self.length, seed: 12)
        fixture.serve(.bytes(content, behavior: Behavior(maxPartialLength: 1)))
        let token = try await fixture.interruptedToken(after: 1000, transport: transport)
        fixture.server.clearRequests()
        let task = try fixture.resumeThroughDisk(token, configuration: configuration(retries: 3), transport: transport)
        let error = try #require(await failure(of: task))
        #expect(error.code == .protocolViolation, "\(error)")
        let requests = fixture.server.requests(for: "/file.bin").count
        #expect(requests == AttemptLimits.maximumFruitlessBodies + 1, "\(requests) requests")
        let kept = try #require(error.resumeToken, "the bytes that came are kept")
        #expect(kept.offset == 1000 + Int64(requests))
    }

    @Test("A flaky link still finishes a small file within the retries: the attempts' bytes add up")
    func smallFileFinishesThroughCuts() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: 16_000, seed: 13)
        fixture.serve(.bytes(content, behavior: Behavior(dropAfterBytes: 4000)))
        let result = try await fixture.download(configuration: configuration(retries: 3)).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.server.requests(for: "/file.bin").count == 4)
    }
}
