import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review: hostile HTTP servers (numbers at the edges, validators, bodies) and hostile names, through
/// both transports.
@Suite("Hostile servers under attack")
struct HostileServerAttackTests {
    // MARK: - Finding 1: a 206 with an unknown complete length runs past the known length and is called complete

    /// Rule broken: "a finished file is exactly the server's bytes".
    ///
    /// The first response announced 100 bytes (`Content-Length: 100`, strong ETag) and was cut at 50. The resume's 206
    /// carries the same ETag but `Content-Range: bytes 50-149/*`: an unknown complete length, so
    /// `receivePartial` skips the `complete != expected` check, keeps `expectedLength == 100` and accepts a body up to
    /// byte 150. `responseEnded` then treats `offset >= expectedLength` as finished (`state.offset >= expected`), and
    /// `finish()` never compares the file's size with the expected length: the finished file is 150 bytes of a
    /// 100-byte representation, with 50 bytes nothing vouched for appended.
    @Test(
        "A 206 whose range runs past the known length is never joined into a longer file",
        arguments: TransportKind.all)
    func partialPastKnownLength(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 100)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 50)
        #expect(token.expectedLength == 100)
        let etag = try #require(token.etag)
        let junk = testBytes(count: 50, seed: 99)
        fixture.server.enqueue(
            ScriptedResponse(
                status: 206,
                headers: [
                    HeaderField("Content-Range", "bytes 50-149/*"), HeaderField("Content-Length", "100"),
                    HeaderField("ETag", etag),
                ],
                body: Array(content[50...]) + junk),
            for: "/file.bin")
        let outcome = await
            (try fixture.resumeThroughDisk(token, configuration: DownloadFixture.configuration(retries: 1)))
            .result
        switch outcome {
        case .success(let result):
            let bytes = try fixture.contents(of: result.fileURL)
            #expect(bytes.count == content.count, "finished with \(bytes.count) bytes of a 100-byte file")
            #expect(bytes.starts(with: content))
        case .failure(let error):
            #expect(error.code != .cancelled, "\(error)")
        }
    }

    // MARK: - Finding 2: a 206 to a request without Range, without validators, loops for ever

    /// Rule broken: a hostile server must get a clear, typed error, not an endless loop (the restart limit,
    /// `maximumRestarts`, exists "so a server that changes on every request cannot loop").
    ///
    /// A server that answers every plain GET with `206 bytes 0-49/100` and no validator: `receivePartial` accepts it
    /// (nothing on disk, `first == 0`), `responseEnded` asks again for the rest (`.requestAgain`), and `nextRequest`
    /// drops the 50 bytes because no strong validator can guard a join (`dropBytes(.noValidators)`) — which does
    /// not count as a restart — so the next request is a plain GET again, and so on. The engine's loop continues on
    /// `.requestAgain` without any bound. The server here has 40 such answers queued, then answers 404: the download
    /// uses all of them.
    @Test(
        "A server that answers every GET with the same short 206 and no validator does not loop for ever",
        arguments: TransportKind.all)
    func shortPartialWithoutValidatorsLoops(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let queued = 40
        for _ in 0..<queued {
            fixture.server.enqueue(
                ScriptedResponse(
                    status: 206,
                    headers: [HeaderField("Content-Range", "bytes 0-49/100"), HeaderField("Content-Length", "50")],
                    body: testBytes(count: 50)),
                for: "/file.bin")
        }
        let task = try fixture.download(configuration: DownloadFixture.configuration(retries: 2))
        let error = try #require(await failure(of: task))
        let requests = fixture.server.requests(for: "/file.bin").count
        #expect(
            requests <= ResumeStateMachine.maximumRestarts + 5,
            "\(requests) requests for one download; it ended with \(error)")
        #expect(fixture.temporaryFiles().count <= 1)
    }

    // MARK: - Finding 3: retries never run out when every attempt's bytes are dropped

    /// Rule broken: a hostile (or broken) server must end in a typed error; `maximumRetries` must bound the retries.
    ///
    /// The server has only a weak ETag and cuts every response at 50 of 100 bytes. Each retry drops the bytes on
    /// disk (no strong validator, `dropBytes(.noValidators)` in `nextRequest`) and starts over; the engine then
    /// measures progress from the *dropped* state (`bytesBefore` is read after `nextRequest`), so each attempt's 50
    /// bytes count as progress and `failuresInARow` is reset to 1 (`DownloadEngine.loop`). With `maximumRetries`
    /// 2 the download should give up after 3 attempts; it goes on as long as the server answers (40 queued cut
    /// answers here, then a 404).
    @Test(
        "Retries run out when every attempt is cut and its bytes must be dropped (weak ETag)",
        arguments: TransportKind.all)
    func retriesNeverRunOutWithoutValidators(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let queued = 40
        for _ in 0..<queued {
            fixture.server.enqueue(
                ScriptedResponse(
                    status: 200,
                    headers: [HeaderField("Content-Length", "100"), HeaderField("ETag", "W/\"weak\"")],
                    body: testBytes(count: 100), closeAfterBodyBytes: 50),
                for: "/file.bin")
        }
        let task = try fixture.download(configuration: DownloadFixture.configuration(retries: 2))
        let error = try #require(await failure(of: task))
        let requests = fixture.server.requests(for: "/file.bin").count
        #expect(requests <= 10, "\(requests) requests with maximumRetries 2; it ended with \(error)")
    }

    // MARK: - Probes: conflicting framing

    /// Two different Content-Length headers (RFC 9112 §6.3: an unrecoverable error). The body is as long as the
    /// second; a finished file must then be all of it, never the first 50 bytes called complete.
    @Test(
        "Conflicting Content-Length headers never produce a short file called complete",
        arguments: TransportKind.all, [["50", "100"], ["100", "50"]])
    func conflictingContentLengths(transport: TransportKind, lengths: [String]) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let body = testBytes(count: 100)
        fixture.server.enqueue(
            ScriptedResponse(
                status: 200,
                headers: lengths.map { HeaderField("Content-Length", $0) } + [HeaderField("ETag", "\"e\"")],
                body: body),
            for: "/file.bin")
        let outcome = await (try fixture.download(configuration: DownloadFixture.configuration(retries: 0))).result
        switch outcome {
        case .success(let result):
            let bytes = try fixture.contents(of: result.fileURL)
            expectSameBytes(bytes, body, "finished with \(bytes.count) bytes")
        case .failure(let error):
            #expect(error.code != .cancelled, "\(error)")
            #expect(!fixture.directory.contents().contains { !TemporaryFileName.isValid($0) }, "no finished file")
        }
    }

    /// `Transfer-Encoding: chunked` with a `Content-Length` that promises more than the chunks carry: never
    /// a short file called complete.
    @Test(
        "Chunked with a larger Content-Length is never a short file called complete", arguments: TransportKind.all)
    func chunkedWithLargerContentLength(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let body = testBytes(count: 50)
        let chunked = Array("32\r\n".utf8) + body + Array("\r\n0\r\n\r\n".utf8)
        fixture.server.enqueue(
            ScriptedResponse(
                status: 200,
                headers: [
                    HeaderField("Transfer-Encoding", "chunked"), HeaderField("Content-Length", "100"),
                    HeaderField("ETag", "\"e\""),
                ],
                body: chunked),
            for: "/file.bin")
        let outcome = await (try fixture.download(configuration: DownloadFixture.configuration(retries: 0))).result
        switch outcome {
        case .success(let result):
            let bytes = try fixture.contents(of: result.fileURL)
            Issue.record("finished with \(bytes.count) bytes although Content-Length said 100")
        case .failure(let error):
            #expect(error.code != .cancelled, "\(error)")
        }
    }

    // MARK: - Names

    /// A dangling symbolic link already in the output directory under the suggested name. The default policy
    /// (`chooseFreeName`) must choose another name — never write through the link.
    @Test(
        "A dangling symlink at the suggested name: the file goes under a free name, nothing is written through it",
        arguments: TransportKind.all)
    func danglingSymlinkAtSuggestedName(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let outside = try TemporaryDirectory()
        let target = outside.url.appendingPathComponent("victim").path
        let link = fixture.directory.url.appendingPathComponent("file.bin").path
        #expect(symlink(target, link) == 0)
        let content = testBytes(count: 1000)
        fixture.serve(.bytes(content))
        let outcome = await (try fixture.download(configuration: DownloadFixture.configuration(retries: 0))).result
        #expect(outside.contents().isEmpty, "nothing is written through the link")
        switch outcome {
        case .success(let result):
            #expect(result.fileURL.lastPathComponent != "file.bin")
            try expectSameBytes(fixture.contents(of: result.fileURL), content)
        case .failure(let error):
            Issue.record("the download failed although a free name was available: \(error)")
        }
    }

    // MARK: - Finding 5: an ETag that is not UTF-8 is sent back as another ETag

    /// Rule broken: "never splice two versions" (a validator that changes between the pause and the resume).
    ///
    /// `ETag: "\xFF"` is a valid entity tag (obs-text, RFC 9110 §8.8.3). The curl transport decodes a header line
    /// that is not UTF-8 as ISO-8859-1 (`HeadCollector.append`), so the token stores `"ÿ"`, and the resume sends it
    /// back UTF-8 encoded: `If-Range: "\xC3\xBF"` — another entity tag. When the file changed meanwhile to a version
    /// whose ETag is exactly those bytes, a correct server sees its current ETag in `If-Range` and answers 206 from the
    /// new version; that 206's ETag decodes to the stored `"ÿ"` too, so `Validators.agree` passes and the first 50
    /// bytes of the old version are joined to the last 50 of the new one.
    ///
    /// libcurl only: the URLSession transport fails such a head ("Failed writing header") before any byte is written.
    @Test(
        "An ETag with obs-text is never sent back altered; a changed file is never spliced",
        arguments: [TransportKind.libcurl])
    func nonUTF8ETagIsTranscoded(transport: TransportKind) async throws {
        let old = testBytes(count: 100, seed: 1)
        let new = testBytes(count: 100, seed: 2)
        let oldTag: [UInt8] = [0x22, 0xFF, 0x22]
        let newTag: [UInt8] = [0x22, 0xC3, 0xBF, 0x22]
        // A correct server holding the new version: 206 when If-Range is its ETag byte for byte, else 200.
        let server = try RawScriptServer { request, index in
            if index == 0 {
                return RawScriptServer.head("200 OK", ["Content-Length: 100"], etag: oldTag)
                    + Array(old[0..<50])
            }
            if let ifRange = RawScriptServer.header("If-Range", in: request), ifRange == newTag,
                RawScriptServer.header("Range", in: request) == Array("bytes=50-".utf8)
            {
                return RawScriptServer.head(
                    "206 Partial Content",
                    ["Content-Range: bytes 50-99/100", "Content-Length: 50"], etag: newTag)
                    + Array(new[50...])
            }
            return RawScriptServer.head("200 OK", ["Content-Length: 100"], etag: newTag) + new
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        var configuration = DownloadFixture.configuration(retries: 0, transport: transport)
        let first = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        let error = try #require(await failure(of: first))
        let token = try #require(error.resumeToken, "\(error)")
        #expect(token.offset == 50)
        configuration.retry.maximumRetries = 2
        let outcome = await (try DownloadTask.resume(from: token, configuration: configuration)).result
        let sentIfRange = server.requests.dropFirst().first.flatMap { RawScriptServer.header("If-Range", in: $0) }
        if let token = token.etag, token.utf8.count != oldTag.count {
            #expect(
                sentIfRange == nil || sentIfRange == oldTag,
                "stored \(token.debugDescription), sent \(sentIfRange ?? [])")
        }
        switch outcome {
        case .success(let result):
            let bytes = [UInt8](try Data(contentsOf: result.fileURL))
            #expect(
                bytes == old || bytes == new,
                "a splice: old[0..<50] + new[50...] is \(bytes == Array(old[0..<50]) + Array(new[50...]))")
        case .failure(let error):
            #expect(error.code != .cancelled, "\(error)")
        }
    }
}

extension Array where Element == UInt8 {
    fileprivate func ends(with suffix: [UInt8]) -> Bool {
        count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix
    }
}
