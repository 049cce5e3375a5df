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
            #expect(bytes == body, "finished with \(bytes.count) bytes")
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
            #expect(try fixture.contents(of: result.fileURL) == content)
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
                return RawScriptServer.head("200 OK", ["Content-Length: 100", "Connection: close"], etag: oldTag)
                    + Array(old[0..<50])
            }
            if let ifRange = RawScriptServer.header("If-Range", in: request), ifRange == newTag,
                RawScriptServer.header("Range", in: request) == Array("bytes=50-".utf8)
            {
                return RawScriptServer.head(
                    "206 Partial Content",
                    ["Content-Range: bytes 50-99/100", "Content-Length: 50", "Connection: close"], etag: newTag)
                    + Array(new[50...])
            }
            return RawScriptServer.head("200 OK", ["Content-Length: 100", "Connection: close"], etag: newTag) + new
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

/// A raw HTTP/1.1 server on the loopback interface for answers `LoopbackServer` cannot write (header bytes that are
/// not UTF-8): each connection's request head is recorded and answered by `respond(head, index)`, then closed.
final class RawScriptServer: Sendable {
    let port: UInt16
    private let listener: Int32
    private final class Recorded: Sendable {
        let heads = Mutex<[[UInt8]]>([])
    }
    private let recorded = Recorded()

    /// The request heads received, in order.
    var requests: [[UInt8]] { recorded.heads.withLock { $0 } }

    init(respond: @escaping @Sendable (_ head: [UInt8], _ index: Int) -> [UInt8]) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 16) == 0 else { throw ResumableError(.network, "raw server: bind/listen") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        port = UInt16(bigEndian: address.sin_port)
        listener = fd
        let recorded = self.recorded
        let thread = Thread {
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 { return }
                var head: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while !head.ends(with: Array("\r\n\r\n".utf8)) {
                    let count = recv(client, &buffer, buffer.count, 0)
                    if count <= 0 { break }
                    head += buffer[0..<count]
                }
                let index = recorded.heads.withLock { requests in
                    requests.append(head)
                    return requests.count - 1
                }
                let response = respond(head, index)
                _ = response.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                shutdown(client, Int32(SHUT_RDWR))
                close(client)
            }
        }
        thread.start()
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    /// A response head: the status line, the lines, an `ETag` of exactly `etag` when given, and the blank line.
    static func head(_ status: String, _ lines: [String], etag: [UInt8]? = nil) -> [UInt8] {
        var bytes = Array("HTTP/1.1 \(status)\r\n".utf8)
        for line in lines { bytes += Array("\(line)\r\n".utf8) }
        if let etag { bytes += Array("ETag: ".utf8) + etag + Array("\r\n".utf8) }
        return bytes + Array("\r\n".utf8)
    }

    /// The raw bytes of the first `name` header in a request head, without surrounding whitespace.
    static func header(_ name: String, in head: [UInt8]) -> [UInt8]? {
        let lines = head.split(separator: UInt8(ascii: "\n")).map { line in
            line.last == UInt8(ascii: "\r") ? line.dropLast() : line
        }
        let prefix = Array(name.lowercased().utf8) + [UInt8(ascii: ":")]
        for line in lines where line.count >= prefix.count {
            let start = line.prefix(prefix.count).map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }
            guard start == prefix else { continue }
            var value = line.dropFirst(prefix.count)
            while value.first == UInt8(ascii: " ") { value = value.dropFirst() }
            while value.last == UInt8(ascii: " ") { value = value.dropLast() }
            return Array(value)
        }
        return nil
    }
}

extension Array where Element == UInt8 {
    fileprivate func ends(with suffix: [UInt8]) -> Bool {
        count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix
    }
}
