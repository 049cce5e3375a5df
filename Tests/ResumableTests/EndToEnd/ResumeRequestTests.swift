import Foundation
import LoopbackServer
import ProcessSpawning
import Testing

@testable import Resumable

/// Part A of the protocol rules: what a resume sends.
@Suite("Resume requests")
struct ResumeRequestTests {
    @Test(
        "Pause, token JSON on disk, resume: the file is byte-identical and the range starts at the offset",
        arguments: TransportKind.all)
    func pauseAndResume(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 2_000_000)
        // The server holds the body after 400 000 bytes: the pause comes mid-transfer, at a known offset.
        let gate = fixture.serveHeld(.bytes(content), after: 400_000)
        let task = try fixture.download()
        try await fixture.waitUntilHeld(at: gate, withOnDisk: 400_000)
        let token = try #require(await task.cancelProducingResumeData())
        #expect(token.offset == 400_000)
        let onDisk = try #require(FileManager.default.attributesOfItem(atPath: token.tempPath)[.size] as? Int)
        #expect(Int64(onDisk) == token.offset, "the temp file holds exactly the token's bytes")
        try expectSameBytes(
            Array(fixture.contents(of: URL(fileURLWithPath: token.tempPath))), Array(content[0..<onDisk]))

        fixture.server.register(.bytes(content), at: "/file.bin")
        fixture.server.clearRequests()
        let resumed = try fixture.resumeThroughDisk(token)
        let result = try await resumed.value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(result.resumedAtOffset == token.offset)
        #expect(result.bytesTransferred == 2_000_000 - token.offset)
        #expect(result.status == 206)
        let request = try #require(fixture.server.requests(for: "/file.bin").first)
        #expect(request.header("Range") == "bytes=\(token.offset)-")
        #expect(request.header("If-Range") == token.etag)
        #expect(request.header("Accept-Encoding") == "identity")
        #expect(fixture.temporaryFiles().isEmpty)
    }

    @Test("A fresh download sends neither Range nor If-Range", arguments: TransportKind.all)
    func freshDownloadHasNoRange(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 1000)))
        _ = try await fixture.download().value
        let request = try #require(fixture.server.requests(for: "/file.bin").first)
        #expect(request.header("Range") == nil)
        #expect(request.header("If-Range") == nil)
    }

    @Test("Validators are stored exactly as received", arguments: TransportKind.all)
    func validatorsStoredExactly(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let etag = "\"ab-\u{21}weird/tag\""
        let modified = "Sat, 07 Nov 2026 10:00:00 GMT"
        fixture.serve(.bytes(testBytes(count: 5000), etag: etag, lastModified: modified))
        let token = try await fixture.interruptedToken(after: 1000)
        #expect(token.etag == etag)
        #expect(token.lastModified == modified)
        #expect(token.expectedLength == 5000)
    }

    @Test(
        "A weak ETag never goes into If-Range: with nothing stronger, the download starts again",
        arguments: TransportKind.all
    )
    func weakETag(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 5000)
        fixture.serve(.bytes(content, etag: "W/\"weak\"", lastModified: nil))
        let token = try await fixture.interruptedToken(after: 1000)
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        let request = try #require(fixture.server.requests(for: "/file.bin").first)
        #expect(request.header("Range") == nil, "a weak ETag cannot prove a join safe: start again")
        #expect(request.header("If-Range") == nil)
        #expect(result.status == 200)
    }

    @Test(
        "A strong Last-Modified (Date at least a second later) goes into If-Range when there is no ETag",
        arguments: TransportKind.all)
    func strongLastModified(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 5000)
        let modified = "Sat, 07 Nov 2026 10:00:00 GMT"
        fixture.serve(.bytes(content, etag: nil, lastModified: modified, date: "Sat, 07 Nov 2026 10:00:05 GMT"))
        let token = try await fixture.interruptedToken(after: 1000)
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        let request = try #require(fixture.server.requests(for: "/file.bin").first)
        #expect(request.header("If-Range") == modified)
        #expect(result.status == 206)
    }

    @Test(
        "A Last-Modified as recent as the Date is weak: the download starts again rather than risk a splice",
        arguments: TransportKind.all)
    func weakLastModified(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 5000)
        let modified = "Sat, 07 Nov 2026 10:00:00 GMT"
        fixture.serve(.bytes(content, etag: nil, lastModified: modified, date: modified))
        let token = try await fixture.interruptedToken(after: 1000)
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        let request = try #require(fixture.server.requests(for: "/file.bin").first)
        #expect(request.header("Range") == nil, "a weak date cannot prove a join safe: start again")
        #expect(request.header("If-Range") == nil)
    }

    @Test(
        "nginx range_if_range: a Last-Modified that changed makes the server send 200, and the new file comes whole",
        arguments: TransportKind.all)
    func lastModifiedChanged(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let modified = "Sat, 07 Nov 2026 10:00:00 GMT"
        fixture.serve(
            .bytes(testBytes(count: 5000), etag: nil, lastModified: modified, date: "Sat, 07 Nov 2026 11:00:00 GMT"))
        let token = try await fixture.interruptedToken(after: 1000)
        let updated = testBytes(count: 6000, seed: 2)
        fixture.serve(.bytes(updated, etag: nil, lastModified: "Sun, 08 Nov 2026 10:00:00 GMT"))
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), updated)
        #expect(result.status == 200)
    }

    @Test(
        "Without any validator, a resume starts again from zero rather than risk a splice", arguments: TransportKind.all
    )
    func noValidators(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 5000), etag: nil, lastModified: nil))
        let token = try await fixture.interruptedToken(after: 1000)
        let changed = testBytes(count: 5000, seed: 9)
        fixture.serve(.bytes(changed, etag: nil, lastModified: nil))
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), changed)
        #expect(fixture.ranges() == [nil])
    }

    @Test(
        "A gzip answer despite Accept-Encoding: identity is refused: a truncated stream would look complete",
        arguments: TransportKind.all)
    func gzipIsNotResumable(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 3_000_000)
        fixture.serve(.bytes(content, behavior: Behavior(gzipWhenAccepted: true, throttleBytesPerSecond: 6_000_000)))
        // The client asks for identity, so a well-behaved server sends it plain.
        let plain = try await fixture.download().value
        try expectSameBytes(fixture.contents(of: plain.fileURL), content)
        #expect(fixture.server.requests(for: "/file.bin").first?.header("Accept-Encoding") == "identity")

        // A server that gzips anyway, here with its stream cut in half but a Content-Length that matches the
        // cut: decoded, it would look complete. It is refused, and nothing is saved.
        let misbehaving = try DownloadFixture(transport: transport)
        misbehaving.server.enqueue(
            ScriptedResponse(
                status: 200,
                headers: [HeaderField("Content-Encoding", "gzip"), HeaderField("ETag", "\"g\"")],
                body: Array(try await GzipFixture.compress(content).prefix(100_000))
            ),
            for: "/file.bin"
        )
        misbehaving.serve(.bytes(content))
        let error = try #require(await failure(of: try misbehaving.download()))
        #expect(error.code == .protocolViolation)
        #expect(error.message.contains("gzip"))
        #expect(misbehaving.directory.contents().isEmpty, "no file, no temporary file")
    }

    @Test("Custom headers are sent, and credentials are never stored in the token", arguments: TransportKind.all)
    func customHeaders(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 5000)))
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 100), for: "/file.bin")
        let configuration = DownloadFixture.configuration(
            retries: 0,
            headers: ["Authorization": "Bearer secret", "X-Client": "tests"]
        )
        let task = try fixture.download(configuration: configuration)
        let error = try #require(await failure(of: task))
        let token = try #require(error.resumeToken)
        #expect(token.headers == ["X-Client": "tests"])
        #expect(!String(decoding: token.jsonData(), as: UTF8.self).contains("secret"))
        let request = try #require(fixture.server.requests(for: "/file.bin").first)
        #expect(request.header("Authorization") == "Bearer secret")
        #expect(request.header("X-Client") == "tests")
    }
}

/// Builds gzip files by shelling out to the system's gzip, for servers that misbehave.
enum GzipFixture {
    /// `bytes` compressed by gzip; the waiting for gzip happens on a thread of its own, not the cooperative pool.
    static func compress(_ bytes: [UInt8]) async throws -> [UInt8] {
        try await onOwnThread { compressBlocking(bytes) }
    }

    private static func compressBlocking(_ bytes: [UInt8]) -> [UInt8] {
        let result = try? SpawnedProcess.run(
            executable: URL(fileURLWithPath: "/bin/gzip"), arguments: ["-c"], input: Data(bytes))
        guard let result, result.termination == .exited(0) else { return [] }
        return [UInt8](result.output)
    }
}
