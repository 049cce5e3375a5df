import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review (helper 48): hostile or broken servers, through the library (`DownloadTask`) and the CLI, with
/// both transports.
@Suite("Hostile servers under attack (helper 48)")
struct HostileServerHelper48AttackTests {
    static let transports: [DownloadTask.Transport] = [.libcurl, .urlSession]

    /// No retries, a long idle timeout, `transport`.
    static func configuration(_ transport: DownloadTask.Transport) -> DownloadTask.Configuration {
        DownloadTask.Configuration(retry: .init(maximumRetries: 0), idleTimeout: .seconds(600), transport: transport)
    }

    /// Downloads `/file.bin` from `server` into `directory`.
    static func download(
        from server: RawScriptServer, into directory: ScratchDirectory, _ configuration: DownloadTask.Configuration
    ) async throws -> Result<DownloadResult, ResumableError> {
        let task = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        return await task.result
    }

    // MARK: - Probe: a head that never ends

    // MARK: - Finding 1: a validator's trailing Unicode space is trimmed away, and two versions are spliced

    /// Rule broken: "never a splice of two versions"; docs/protocol-rules.md rule 5, "validators stored exactly as
    /// received".
    ///
    /// The first answer carries `ETag: "v"` followed by one non-ASCII space character: U+2000 or U+3000 in UTF-8, or
    /// a single 0xA0 byte (read as ISO-8859-1 U+00A0). RFC 9110 §5.5 trims only SP and HTAB around a field value, so
    /// that is another entity tag than `"v"` (a server compares octets). The libcurl transport's
    /// `HeadCollector.trimmingWhitespace` also trims every Unicode space separator, so the token stores `"v"`, and the
    /// resume sends `If-Range: "v"`. The file changed meanwhile to a version whose ETag is exactly `"v"`: a correct
    /// server sees its current ETag in `If-Range` and answers 206 from the new version, carrying `ETag: "v"`, which
    /// `Validators.agree` accepts: 50 bytes of the old version and 50 of the new one become the finished file.
    ///
    /// (The URLSession transport drops such an ETag, or fails the head, so it restarts: no splice there.)
    @Test(
        "A validator that ends in a non-ASCII space is never shortened into another version's",
        arguments: transports, [[0xE2, 0x80, 0x80], [0xE3, 0x80, 0x80], [0xC2, 0xA0], [0xA0]] as [[UInt8]])
    func validatorTrailingUnicodeSpace(transport: DownloadTask.Transport, trailer: [UInt8]) async throws {
        let old = Resource.generatedBytes(seed: 1, range: 0..<100)
        let new = Resource.generatedBytes(seed: 2, range: 0..<100)
        let oldTag = Array("\"v\"".utf8) + trailer
        let newTag = Array("\"v\"".utf8)
        // Request 0: the old version, cut at 50 bytes. Later: a correct server holding the new version (206 when
        // If-Range is its ETag byte for byte, else 200).
        let server = try RawScriptServer { head, index, send in
            if index == 0 {
                _ = send(RawScriptServer.head("200 OK", ["Content-Length: 100"], etag: oldTag) + old[0..<50])
                return .completed(0)
            }
            if RawScriptServer.header("If-Range", in: head) == newTag,
                RawScriptServer.header("Range", in: head) == Array("bytes=50-".utf8)
            {
                _ = send(
                    RawScriptServer.head(
                        "206 Partial Content", ["Content-Range: bytes 50-99/100", "Content-Length: 50"], etag: newTag)
                        + new[50...])
                return .completed(206)
            }
            _ = send(RawScriptServer.head("200 OK", ["Content-Length: 100"], etag: newTag) + new)
            return .completed(200)
        }
        defer { server.stop() }
        let directory = try ScratchDirectory()
        var configuration = Self.configuration(transport)
        let first = try await Self.download(from: server, into: directory, configuration)
        guard case .failure(let error) = first, let token = error.resumeToken else {
            // URLSession refuses a head with a byte that is not UTF-8 (a lone 0xA0) before any body: nothing was
            // written, so there is nothing to resume and nothing to splice.
            #expect(directory.contents().isEmpty, "no token, yet files were left: \(directory.contents()), \(first)")
            if case .success = first { Issue.record("the first download was cut at 50 bytes, yet it finished") }
            return
        }
        if let stored = token.etag {
            #expect(
                Array(stored.utf8) != newTag, "the token stores \(stored.debugDescription), the server sent \(oldTag)")
        }
        configuration.retry.maximumRetries = 1
        let outcome = await (try DownloadTask.resume(from: token, configuration: configuration)).result
        if case .success(let result) = outcome {
            let bytes = [UInt8](try Data(contentsOf: result.fileURL))
            let oneVersion = bytes == old || bytes == new
            #expect(oneVersion, "neither version; old prefix + new suffix: \(bytes == Array(old[0..<50] + new[50...]))")
        }
    }

    // MARK: - Finding 2: a gzip transfer coding cut short is a short file called complete

    /// Rule broken: "never a short body called complete".
    ///
    /// The library refuses a `200` with `Content-Encoding: gzip` because "a decoded body has no length to check and a
    /// truncated stream looks complete" (`ResumeStateMachine.receiveWhole`). The same coding as a *transfer* coding
    /// (`Transfer-Encoding: gzip, chunked`, or `gzip` alone, which is then delimited by the connection's close) goes
    /// through: both transports decode it (libcurl is told `CURLOPT_ACCEPT_ENCODING ""`), the state machine never
    /// looks at `Transfer-Encoding`, and a gzip stream that stops half-way (no deflate end, no gzip trailer) ends the
    /// body as if it were whole. Here the server's gzip stream of a 200,000-byte file is cut at half its length: the
    /// download finishes with the 99,996 bytes that the first half decodes to.
    @Test(
        "A 200 whose gzip transfer coding is cut short is never a finished file",
        arguments: transports, ["gzip, chunked", "gzip"])
    func truncatedTransferCodingGzip(transport: DownloadTask.Transport, coding: String) async throws {
        let content = Resource.generatedBytes(seed: 5, range: 0..<200_000)
        let compressed = gzipped(content)
        let cut = Array(compressed.prefix(compressed.count / 2))
        let body: [UInt8] =
            coding.hasSuffix("chunked")
            ? Array(String(cut.count, radix: 16).utf8) + [13, 10] + cut + Array("\r\n0\r\n\r\n".utf8) : cut
        let server = try RawScriptServer { _, _, send in
            _ = send(
                RawScriptServer.head(
                    "200 OK", ["Transfer-Encoding: \(coding)", "Accept-Ranges: bytes"], etag: Array("\"e\"".utf8))
                    + body)
            return .completed(0)
        }
        defer { server.stop() }
        let directory = try ScratchDirectory()
        if case .success(let result) = try await Self.download(
            from: server, into: directory, Self.configuration(transport))
        {
            let bytes = [UInt8](try Data(contentsOf: result.fileURL))
            let whole = bytes == content
            #expect(whole, "finished with \(bytes.count) of the file's \(content.count) bytes")
        }
    }

    /// Found by an attack (helper-66, on the own-sockets spike, then both transports): `Transfer-Encoding: chunked,
    /// chunked` passed as plain chunked. Both transports decode one layer and the engine ignored `chunked` however
    /// often it came, so the inner chunk framing ("5\r\nhello\r\n0\r\n\r\n") became the finished file. RFC 9112 §6.1:
    /// a sender must not apply chunked more than once.
    @Test("A body chunked twice is refused, never saved with its inner chunk framing", arguments: transports)
    func doubleChunked(transport: DownloadTask.Transport) async throws {
        let body = Array("f\r\n5\r\nhello\r\n0\r\n\r\n\r\n0\r\n\r\n".utf8)
        let server = try RawScriptServer { _, _, send in
            _ = send(
                RawScriptServer.head("200 OK", ["Transfer-Encoding: chunked, chunked"], etag: Array("\"e\"".utf8))
                    + body)
            return .completed(0)
        }
        defer { server.stop() }
        let directory = try ScratchDirectory()
        let outcome = try await Self.download(from: server, into: directory, Self.configuration(transport))
        guard case .failure(let error) = outcome else {
            Issue.record("a body chunked twice finished: \(outcome)")
            return
        }
        #expect(error.code == .protocolViolation, "\(error)")
        #expect(error.message.contains("chunked"), "\(error)")
    }

    // MARK: - Finding 3: an Accept-Ranges value with a control character makes every token unreadable

    /// Rule broken: "interrupts, crashes and transient errors leave a token and a temp file that resume from where
    /// the data stopped".
    ///
    /// `ResumeStateMachine` stores the server's `Accept-Ranges` value as it came (`state.acceptRanges =
    /// head.value("Accept-Ranges")`, unlike the validators, which `Validators(of:)` filters), and the token writer
    /// writes it; the token reader refuses a value with a control character (`decodeHeaderValue`: "holds characters
    /// a header cannot carry"). So `Accept-Ranges: bytes<DEL>` (or ESC, or any C0 byte but tab) makes every token of
    /// the download unreadable: the 50 bytes on disk can never be resumed in another process (or by the CLI), and a
    /// queue's record is refused at restore. In-process resumes work only because they skip the reader.
    @Test(
        "A token written after an Accept-Ranges with a control character can be read back and resumed",
        arguments: transports, ["bytes\u{7F}", "bytes\u{1B}[0m"])
    func acceptRangesControlCharacter(transport: DownloadTask.Transport, value: String) async throws {
        let content = Resource.generatedBytes(seed: 7, range: 0..<100)
        let server = try Self.acceptRangesServer(content: content, value: value)
        defer { server.stop() }
        let directory = try ScratchDirectory()
        var configuration = Self.configuration(transport)
        guard case .failure(let error) = try await Self.download(from: server, into: directory, configuration) else {
            Issue.record("the first download was cut at 50 bytes, yet it finished")
            return
        }
        let token = try #require(error.resumeToken, "\(error)")
        let file = directory.url.appendingPathComponent("token.json")
        try token.write(to: file)
        let read: ResumeToken
        do {
            read = try ResumeToken(contentsOf: file)
        } catch {
            Issue.record("the token this library wrote cannot be read back: \(error)")
            return
        }
        configuration.retry.maximumRetries = 1
        let result = try await DownloadTask.resume(from: read, configuration: configuration).value
        let whole = [UInt8](try Data(contentsOf: result.fileURL)) == content
        #expect(whole)
    }

    /// The same through the CLI: `resumable get` cut at 50 bytes leaves a token file that `resumable resume` refuses
    /// (exit 65, invalid token), so the bytes on disk are lost.
    @Test(
        "get then resume: an Accept-Ranges with a control character does not make the token file unusable",
        arguments: ["libcurl", "urlsession"])
    func acceptRangesControlCharacterCLI(transport: String) async throws {
        let content = Resource.generatedBytes(seed: 8, range: 0..<100)
        let server = try Self.acceptRangesServer(content: content, value: "bytes\u{7F}")
        defer { server.stop() }
        let scratch = try ScratchDirectory()
        let output = scratch.url.appendingPathComponent("out", isDirectory: true)
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let url = "http://127.0.0.1:\(server.port)/file.bin"
        let first = try await CLIProcess.run(
            ["get", url, "-o", output.path + "/", "--retries", "0", "-q", "--transport", transport], in: scratch.url)
        try #require(first.exitCode == 75, "\(first)")
        let tokenURL = output.appendingPathComponent("file.bin.resumable.json")
        try #require(FileManager.default.fileExists(atPath: tokenURL.path))
        let resumed = try await CLIProcess.run(
            ["resume", tokenURL.path, "--retries", "1", "-q", "--transport", transport], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        let finished = output.appendingPathComponent("file.bin")
        if resumed.exitCode == 0 {
            let whole = [UInt8](try Data(contentsOf: finished)) == content
            #expect(whole)
        }
    }

    /// First request: 200 with `Accept-Ranges: <value>` and a strong ETag, cut after 50 of 100 bytes; later requests:
    /// a correct 206 for `bytes=50-`.
    private static func acceptRangesServer(content: [UInt8], value: String) throws -> RawScriptServer {
        try RawScriptServer { head, index, send in
            let etag = Array("\"e\"".utf8)
            if index == 0 {
                _ = send(
                    RawScriptServer.head(
                        "200 OK", ["Content-Length: 100", "Accept-Ranges: \(value)"], etag: etag) + content[0..<50])
                return .completed(0)
            }
            guard RawScriptServer.header("Range", in: head) == Array("bytes=50-".utf8) else {
                _ = send(RawScriptServer.head("200 OK", ["Content-Length: 100"], etag: etag) + content)
                return .completed(200)
            }
            _ = send(
                RawScriptServer.head(
                    "206 Partial Content", ["Content-Range: bytes 50-99/100", "Content-Length: 50"], etag: etag)
                    + content[50...])
            return .completed(206)
        }
    }

    /// The same cause through a `get` that succeeds: each checkpoint finds the token file it wrote before unreadable,
    /// takes it for someone else's file and writes the next numbered one (`file.bin.2.resumable.json`, `.3.`, … up to
    /// 1000); none of them is removed at the end. Measured: a 4-second download left five token files beside the
    /// finished file; here one is enough to fail.
    @Test(
        "get: an Accept-Ranges with a control character leaves no token files behind a finished download",
        arguments: ["libcurl", "urlsession"])
    func acceptRangesControlCharacterLeavesTokens(transport: String) async throws {
        let content = Resource.generatedBytes(seed: 9, range: 0..<4000)
        let server = try RawScriptServer { _, _, send in
            _ = send(
                RawScriptServer.head(
                    "200 OK", ["Content-Length: 4000", "Accept-Ranges: bytes\u{7F}"], etag: Array("\"e\"".utf8))
                    + content)
            return .completed(0)
        }
        defer { server.stop() }
        let scratch = try ScratchDirectory()
        let output = scratch.url.appendingPathComponent("out", isDirectory: true)
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let result = try await CLIProcess.run(
            [
                "get", "http://127.0.0.1:\(server.port)/file.bin", "-o", output.path + "/", "-q", "--transport",
                transport,
            ],
            in: scratch.url)
        try #require(result.exitCode == 0, "\(result)")
        let left = try FileManager.default.contentsOfDirectory(atPath: output.path).sorted()
        #expect(left == ["file.bin"], "left in the output directory: \(left)")
    }

}

/// `bytes` as a gzip member of stored (uncompressed) deflate blocks, with its CRC-32 and length trailer.
func gzipped(_ bytes: [UInt8]) -> [UInt8] {
    var out: [UInt8] = [0x1F, 0x8B, 0x08, 0, 0, 0, 0, 0, 0, 0xFF]
    var start = 0
    repeat {
        let end = min(start + 65_535, bytes.count)
        let length = UInt16(end - start)
        out.append(end == bytes.count ? 1 : 0)
        out += [UInt8(length & 0xFF), UInt8(length >> 8), UInt8(~length & 0xFF), UInt8(~length >> 8)]
        out += bytes[start..<end]
        start = end
    } while start < bytes.count
    var crc: UInt32 = 0xFFFF_FFFF
    for byte in bytes {
        crc ^= UInt32(byte)
        for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
    }
    crc = ~crc
    let size = UInt32(truncatingIfNeeded: bytes.count)
    for value in [crc, size] { out += (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
    return out
}
