import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Part B of the protocol rules: how answers are read, joined or refused.
@Suite("Reading answers")
struct AnswerHandlingTests {
    @Test(
        "A 206 that starts at the wrong offset is never joined: the file restarts and comes out right",
        arguments: TransportKind.all)
    func wrongStart(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 10_000)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 4000)
        fixture.server.enqueue(behavior: Behavior(rangeStartShift: 100), for: "/file.bin")
        fixture.server.clearRequests()
        let task = try fixture.resumeThroughDisk(token)
        let events = task.events
        let result = try await task.value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges() == ["bytes=4000-", nil])
        var restarted = false
        for await event in events {
            if case .restarted = event { restarted = true }
        }
        #expect(restarted, "the restart is reported")
    }

    @Test("A short 206 is continued with new range requests until the file is whole", arguments: TransportKind.all)
    func shortPartials(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 10_000)
        fixture.serve(.bytes(content, behavior: Behavior(maxPartialLength: 3000)))
        let token = try await fixture.interruptedToken(after: 1000)
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges() == ["bytes=1000-", "bytes=4000-", "bytes=7000-"])
    }

    @Test(
        "curl 1042: a 200 to a range request truncates and takes the whole new body, no splice",
        arguments: TransportKind.all)
    func ignoredRange(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 200)))
        let token = try await fixture.interruptedToken(after: 150)
        let replacement = testBytes(count: 100, seed: 7)
        fixture.serve(.bytes(replacement, behavior: Behavior(ignoreRange: true)))
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), replacement)
        #expect(result.status == 200)
    }

    @Test("The file changed between pause and resume: the new file arrives whole", arguments: TransportKind.all)
    func contentChanged(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 50_000)))
        let token = try await fixture.interruptedToken(after: 20_000)
        let updated = testBytes(count: 60_000, seed: 3)
        fixture.serve(.bytes(updated))
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), updated)
        #expect(result.etag != token.etag)
        let request = try #require(fixture.server.requests(for: "/file.bin").first)
        #expect(request.header("If-Range") == token.etag)
    }

    @Test("A 206 whose validators differ from the stored ones is not joined", arguments: TransportKind.all)
    func partialWithChangedValidators(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 10_000)))
        let token = try await fixture.interruptedToken(after: 5000)
        // A server that ignores If-Range and answers 206 from the new file.
        let updated = testBytes(count: 10_000, seed: 5)
        fixture.serve(.bytes(updated, behavior: Behavior(ignoreIfRange: true)))
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), updated)
        #expect(fixture.ranges() == ["bytes=5000-", nil])
    }

    @Test(
        "wget Test-c-full, curl 92: a 416 with bytes */offset finishes without downloading; the body is ignored",
        arguments: TransportKind.all)
    func alreadyComplete(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 87)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 60)
        // Complete the temp file by hand, as if the last bytes arrived before the crash.
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: token.tempPath))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(content[60...]))
        try handle.close()
        let complete = try ResumeToken(jsonData: patched(token.jsonData(), offset: 87))
        fixture.server.enqueue(
            ScriptedResponse(
                status: 416,
                headers: [HeaderField("Content-Range", "bytes */87"), HeaderField("Content-Length", "12")],
                body: Array("junk body!!\n".utf8)
            ),
            for: "/file.bin"
        )
        let result = try await fixture.resumeThroughDisk(complete).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(result.status == 416)
        #expect(result.bytesTransferred == 0)
    }

    @Test(
        "wget Test-c-shorter: the server's file is now shorter than the bytes on disk: restart, no splice",
        arguments: TransportKind.all)
    func remoteShrank(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 200)))
        let token = try await fixture.interruptedToken(after: 150)
        let shorter = testBytes(count: 100, seed: 11)
        fixture.serve(.bytes(shorter, etag: token.etag))  // same ETag: only the 416 can tell
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), shorter)
    }

    @Test(
        "curl 1040: a 416 without Content-Range is ambiguous: the file is fetched again, not assumed complete",
        arguments: TransportKind.all)
    func ambiguous416(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 300)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 100)
        fixture.server.enqueue(ScriptedResponse(status: 416, text: "no"), for: "/file.bin")
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges() == ["bytes=100-", nil])
    }

    @Test(
        "A multipart/byteranges answer to a single range is refused and the file restarts", arguments: TransportKind.all
    )
    func multipart(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 5000)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 1000)
        fixture.server.enqueue(behavior: Behavior(multipartRanges: true), for: "/file.bin")
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        // The bytes on disk were dropped: the finished file was not continued from the token's offset.
        #expect(result.resumedAtOffset == 0)
        #expect(result.restarted)
        #expect(result.status == 200)
    }

    @Test(
        "WPT invalid Content-Range values are never joined",
        arguments: TransportKind.all,
        [
            "0-1/1000", "bytes -10-100", "bytes 7-4/10", "bytes ABC-1/10", "80", "bytes something", "-12", "bytes 3 3",
        ]
    )
    func invalidContentRange(transport: TransportKind, value: String) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 5000)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 1000)
        fixture.server.enqueue(behavior: Behavior(extraContentRange: value), for: "/file.bin")
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges() == ["bytes=1000-", nil])
    }

    @Test(
        "Accept-Ranges: none marks the token as advised against resuming, and a resume still ends correct",
        arguments: TransportKind.all)
    func acceptRangesNone(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 5000)
        fixture.serve(.bytes(content, acceptRanges: "none", behavior: Behavior(ignoreRange: true)))
        let token = try await fixture.interruptedToken(after: 1000)
        #expect(token.serverAdvisesAgainstRanges)
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
    }

    @Test(
        "Error statuses never become the file, and leave nothing behind", arguments: TransportKind.all,
        [404, 403, 410, 401])
    func permanentErrors(transport: TransportKind, status: Int) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 100), behavior: Behavior(status: status)))
        let task = try fixture.download()
        let error = try #require(await failure(of: task))
        #expect(error.code == .httpStatus)
        #expect(error.httpStatus == status)
        #expect(!error.isTransient)
        #expect(error.resumeToken == nil)
        #expect(fixture.directory.contents().isEmpty, "no file, no temporary file")
    }

    @Test(
        "5xx is transient: retried with backoff, honouring Retry-After, and the download completes",
        arguments: TransportKind.all)
    func transientErrorsAreRetried(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 20_000)
        fixture.serve(.bytes(content))
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 5000), for: "/file.bin")
        fixture.server.enqueue(behavior: Behavior(status: 503, retryAfter: "0"), for: "/file.bin")
        fixture.server.enqueue(behavior: Behavior(status: 500), for: "/file.bin")
        let task = try fixture.download()
        let events = task.events
        let result = try await task.value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges() == [nil, "bytes=5000-", "bytes=5000-", "bytes=5000-"])
        var retries = 0
        for await event in events {
            if case .retrying = event { retries += 1 }
        }
        #expect(retries == 3)
    }

    @Test(
        "When retries run out, the error is transient and carries a token at the bytes on disk",
        arguments: TransportKind.all)
    func retriesRunOut(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 20_000)
        fixture.serve(.bytes(content))
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 5000), for: "/file.bin")
        for _ in 0..<3 { fixture.server.enqueue(behavior: Behavior(status: 503), for: "/file.bin") }
        let task = try fixture.download(configuration: DownloadFixture.configuration(retries: 2))
        let error = try #require(await failure(of: task))
        #expect(error.isTransient)
        #expect(error.httpStatus == 503)
        let token = try #require(error.resumeToken)
        #expect(token.offset == 5000)
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
    }

    @Test(
        "A body cut short (Content-Length or chunked without the last chunk) is resumed, never complete",
        arguments: TransportKind.all, [false, true])
    func earlyClose(transport: TransportKind, chunked: Bool) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 30_000)
        fixture.serve(.bytes(content, behavior: Behavior(chunked: chunked)))
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 12_345, chunked: chunked), for: "/file.bin")
        let result = try await fixture.download().value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges() == [nil, "bytes=12345-"])
    }

    @Test("A connection reset mid-body is transient and resumed", arguments: TransportKind.all)
    func connectionReset(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 30_000)
        fixture.serve(.bytes(content))
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 10_000, resetOnDrop: true), for: "/file.bin")
        let result = try await fixture.download().value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges()[0] == nil)
        #expect(fixture.ranges().count == 2)
    }

    @Test(
        "A body far longer than announced is an error or a correct file, never extra bytes",
        arguments: TransportKind.all)
    func bodyLongerThanAnnounced(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let body = testBytes(count: 10_000)
        fixture.server.enqueue(
            ScriptedResponse(
                status: 200, headers: [HeaderField("Content-Length", "100"), HeaderField("ETag", "\"x\"")], body: body),
            for: "/file.bin"
        )
        switch try await fixture.download(configuration: DownloadFixture.configuration(retries: 0)).result {
        case .success(let result):
            try expectSameBytes(fixture.contents(of: result.fileURL), Array(body[0..<100]))
        case .failure(let error):
            #expect(error.code == .protocolViolation)
        }
    }
}

/// The token's JSON with another offset, for hand-made situations.
func patched(_ json: Data, offset: Int64) throws -> Data {
    var object = try #require(JSONSerialization.jsonObject(with: json) as? [String: Any])
    object["offset"] = offset
    return try JSONSerialization.data(withJSONObject: object)
}
