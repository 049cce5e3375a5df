import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Adversarial review of c312450 end to end: the single-connection writer now hands each written piece to the
/// hasher's slots. Whatever path the bytes take into the file (cut connections and retries, a resume with bytes on
/// disk, a restart into a new file, gaps between completed ranges, a multi-connection phase after bytes the single
/// path wrote), the digest reported is that of the finished file, and an expected digest is checked against it.
@Suite("Hashing end to end under attack", .timeLimit(.minutes(3)))
struct HashingAttackTests {
    static let length = 3 * (1 << 20) + 12_345

    static func configuration(
        expected: String?, connections: DownloadTask.Connections = .single, retries: Int = 5
    ) -> DownloadTask.Configuration {
        var configuration = DownloadFixture.configuration(retries: retries)
        configuration.connections = connections
        configuration.minimumSegmentLength = 256 << 10
        configuration.segmentStallTimeout = .seconds(600)
        configuration.computesSHA256 = true
        configuration.expectedSHA256 = expected
        return configuration
    }

    /// The finished file holds `content`, and the digest reported is its digest.
    static func check(_ result: DownloadResult, holds content: [UInt8], fixture: DownloadFixture) throws {
        let onDisk = try fixture.contents(of: result.fileURL)
        expectSameBytes(onDisk, content)
        #expect(result.sha256 == (try SHA256Hasher.hex(of: onDisk)))
    }

    @Test("Cut four times at odd offsets, retried each time: the digest is the file's", arguments: TransportKind.all)
    func cutsAndRetries(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: Self.length, seed: 301)
        let expected = try SHA256Hasher.hex(of: content)
        fixture.serve(.bytes(content))
        for cut in [1 as Int64, 700_001, 1_048_576, 333] {
            fixture.server.enqueue(behavior: Behavior(dropAfterBytes: cut), for: "/file.bin")
        }
        let result = try await fixture.download(configuration: Self.configuration(expected: expected)).value
        try Self.check(result, holds: content, fixture: fixture)
        #expect(fixture.ranges().count == 5)

        // The same path with a wrong expectation is refused: the test can fail.
        for cut in [1 as Int64, 700_001] {
            fixture.server.enqueue(behavior: Behavior(dropAfterBytes: cut), for: "/file.bin")
        }
        let wrong = String(repeating: "0", count: 64)
        let error = try #require(
            await failure(of: fixture.download(configuration: Self.configuration(expected: wrong))))
        #expect(error.code == .checksumMismatch)
    }

    @Test(
        "Paused at an odd offset in the middle of a slot, resumed: bytes on disk read back, the rest kept; digest right",
        arguments: TransportKind.all)
    func pauseAndResume(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: Self.length, seed: 302)
        let expected = try SHA256Hasher.hex(of: content)
        let held: Int64 = (1 << 20) + 4_097
        let gate = fixture.serveHeld(.bytes(content), after: held)
        let task = try fixture.download(configuration: Self.configuration(expected: expected))
        try await fixture.waitUntilHeld(at: gate, withOnDisk: held)
        let token = try #require(await task.cancelProducingResumeData())
        #expect(token.offset == held)
        gate.open()
        let result = try await fixture.resumeThroughDisk(token, configuration: Self.configuration(expected: nil)).value
        try Self.check(result, holds: content, fixture: fixture)
        #expect(result.resumedAtOffset == held)
    }

    @Test(
        "A resume answered with 200 (same and new content) starts a new file with a new hasher: digest right",
        arguments: [false, true])
    func restartOn200(newContent: Bool) async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: Self.length, seed: 303)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 1_500_001)
        let served = newContent ? testBytes(count: Self.length + 5, seed: 304) : content
        var resource = Resource.bytes(served)
        resource.behavior.ignoreRange = true
        fixture.serve(resource)
        let result = try await fixture.resumeThroughDisk(token, configuration: Self.configuration(expected: nil)).value
        try Self.check(result, holds: served, fixture: fixture)
        #expect(result.restarted)
    }

    @Test(
        "A resume whose token lists a completed range beyond a gap: the single writer fills the gaps around it",
        arguments: TransportKind.all)
    func gapsAroundACompletedRange(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: Self.length, seed: 305)
        let expected = try SHA256Hasher.hex(of: content)
        fixture.serve(.bytes(content))
        let cut: Int64 = 500_001
        let real = try await fixture.interruptedToken(after: cut)
        // A completed range from 1,300,007 to 2,100,003, written into the file as a multi-connection phase would.
        let range: Range<Int64> = 1_300_007..<2_100_003
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: real.tempPath))
        try handle.seek(toOffset: UInt64(range.lowerBound))
        try handle.write(contentsOf: Data(content[Int(range.lowerBound)..<Int(range.upperBound)]))
        try handle.close()
        let token = ResumeToken(
            url: real.url, originalURL: real.originalURL, offset: real.offset, completedRanges: [range],
            expectedLength: real.expectedLength, etag: real.etag, lastModified: real.lastModified,
            responseDate: real.responseDate, acceptRanges: real.acceptRanges, tempPath: real.tempPath,
            suggestedFilename: real.suggestedFilename, destination: real.destination, headers: real.headers,
            expectedSHA256: expected, createdAt: real.createdAt, updatedAt: real.updatedAt)
        let result = try await fixture.resumeThroughDisk(token, configuration: Self.configuration(expected: nil)).value
        try Self.check(result, holds: content, fixture: fixture)
        #expect(fixture.ranges().dropFirst().first == "bytes=\(cut)-\(range.lowerBound - 1)")
    }

    @Test(
        "Bytes the single path wrote (and kept), then a multi-connection phase for the rest: digest right",
        arguments: TransportKind.all)
    func segmentsAfterSinglePath(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 4 * (1 << 20) + 777, seed: 306)
        let expected = try SHA256Hasher.hex(of: content)
        // No Accept-Ranges on the first 200: it is read alone, through the single path, and cut; the 206 that
        // follows proves ranges work, and the rest comes over four connections.
        fixture.serve(.bytes(content, acceptRanges: nil))
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 1_000_003), for: "/file.bin")
        let events = EventLog()
        var configuration = Self.configuration(expected: expected, connections: .fixed(4))
        configuration.eventHandler = { events.append($0) }
        let result = try await fixture.download(configuration: configuration).value
        try Self.check(result, holds: content, fixture: fixture)
        #expect(!events.segmentsStarted.isEmpty, "a multi-connection phase followed the cut")
    }
}
