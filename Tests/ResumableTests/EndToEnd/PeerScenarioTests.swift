import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Part E of the protocol rules: scenarios from curl's and wget's own test suites, re-expressed.
@Suite("Peer scenarios")
struct PeerScenarioTests {
    static func header(_ name: String, _ value: String) -> HeaderField { HeaderField(name, value) }

    @Test(
        "curl 1043: 40 bytes on disk and a 206 bytes 40-99/100 give 40 old + 60 new bytes", arguments: TransportKind.all
    )
    func curl1043(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 100)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 40)
        let onDisk = try fixture.contents(of: URL(fileURLWithPath: token.tempPath))
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        let file = try fixture.contents(of: result.fileURL)
        expectSameBytes(Array(file[0..<40]), onDisk)
        expectSameBytes(file, content)
        #expect(fixture.ranges() == ["bytes=40-"])
    }

    @Test(
        "curl 3035: 200 cut at 5, 206 cut at 11, a 404, a surprise 200, then 206 11-25: offsets advance and the file is right",
        arguments: TransportKind.all
    )
    func curl3035(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = Array("abcdefghijklmnopqrstuvwxyz".utf8)
        let etag = Self.header("ETag", "\"3035\"")
        let script: [ScriptedResponse] = [
            ScriptedResponse(
                status: 200,
                headers: [Self.header("Content-Length", "26"), etag],
                body: content,
                closeAfterBodyBytes: 5
            ),
            ScriptedResponse(
                status: 206,
                headers: [Self.header("Content-Range", "bytes 5-25/26"), Self.header("Content-Length", "21"), etag],
                body: Array(content[5...]),
                closeAfterBodyBytes: 6
            ),
            ScriptedResponse(
                status: 404, headers: [Self.header("Content-Length", "9")], body: Array("not here\n".utf8)),
        ]
        for response in script { fixture.server.enqueue(response, for: "/file.bin") }
        // The library retries the first two cuts itself; the 404 is permanent and ends this run with a token.
        let task = try fixture.download(configuration: DownloadFixture.configuration(retries: 5))
        let error = try #require(await failure(of: task))
        #expect(error.httpStatus == 404)
        let token = try #require(error.resumeToken)
        #expect(token.offset == 11)
        #expect(fixture.ranges() == [nil, "bytes=5-", "bytes=11-"])
        try expectSameBytes(fixture.contents(of: URL(fileURLWithPath: token.tempPath)), Array(content[0..<11]))

        // Resumed later: a surprise 200 with a 30-byte body (another version) restarts cleanly …
        let other = Array("0123456789abcdefghijklmnopqrst".utf8)
        fixture.server.enqueue(
            ScriptedResponse(
                status: 200,
                headers: [Self.header("Content-Length", "30"), Self.header("ETag", "\"other\"")],
                body: other,
                closeAfterBodyBytes: 3
            ),
            for: "/file.bin"
        )
        // … and after it is cut, the original returns: a 206 for the other version's offset cannot be joined.
        fixture.server.enqueue(
            ScriptedResponse(
                status: 206,
                headers: [Self.header("Content-Range", "bytes 11-25/26"), Self.header("Content-Length", "15"), etag],
                body: Array(content[11...])
            ),
            for: "/file.bin"
        )
        fixture.serve(.bytes(content, etag: "\"3035\""))
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges().first == "bytes=11-")
    }

    @Test(
        "curl 1273 and wget Test-c-full: a complete file and a 416 leave the file unchanged",
        arguments: TransportKind.all)
    func completeFileAnd416(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 500)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 250)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: token.tempPath))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(content[250...]))
        try handle.close()
        let complete = try ResumeToken(jsonData: patched(token.jsonData(), offset: 500))
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(complete).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(result.status == 416)
        #expect(fixture.ranges() == ["bytes=500-"])
    }

    @Test(
        "Go ServeContent: a weak ETag is never sent in If-Range, so the server cannot be asked a weak question",
        arguments: TransportKind.all)
    func goWeakIfRange(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 3000)
        fixture.serve(.bytes(content, etag: "W/\"A\"", lastModified: nil))
        let token = try await fixture.interruptedToken(after: 1000)
        // A server that changed and kept the weak tag answers 206 of new bytes: the 206 carries another tag.
        let changed = testBytes(count: 3000, seed: 42)
        fixture.serve(.bytes(changed, etag: "W/\"B\"", lastModified: nil))
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), changed)
        let first = try #require(fixture.server.requests(for: "/file.bin").first)
        #expect(first.header("If-Range") == nil)
        #expect(fixture.ranges() == [nil], "with only a weak tag, nothing is joined")
    }
}
