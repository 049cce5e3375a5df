import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review of the issue-9 changes (the If-Range CDN quirk, cancellation/pause/deadline, expectedSHA256 in
/// the token, the richer DownloadResult, and the retry classification of errors before a head).
///
/// Every test in this suite failed on the `main` it was written against (abc3105); each comment says which rule
/// it broke and how. A fifth finding, a head cut in the middle of a header line, crashes swift-corelibs-foundation
/// (`NativeProtocol.swift: Fatal error: Transfer completed, but there's no response.`); it cannot be tested in
/// process and is a documented limitation of the URLSession transport (README, "Transports").
@Suite("Issue 9 under attack")
struct Issue9AttackTests {
    // MARK: - Finding A: quirk mode accepts an unvalidated 416 as "complete" (short body called complete)

    /// Rule broken: "never call a short body complete".
    ///
    /// Once the machine has decided that the server ignores entity-tag If-Ranges (`ignoresEntityTagIfRange`), a
    /// resume without a strong Last-Modified is sent as a *bare* `Range: bytes=N-` (no If-Range). A 206 to it is
    /// joined only when it carries the stored strong ETag — but a **416 `bytes */N`** is still taken as "already
    /// complete" by `receiveUnsatisfiable`, which only checks `state.validators.agree(with:)` (vacuously true when
    /// the 416 carries no ETag) and `expectedLength == nil || == N`. Before the quirk, a 416 always answered a
    /// request that carried If-Range, so the server had checked the validator; in quirk mode nothing did.
    ///
    /// Reproduction: a chunked 200 (no Content-Length, so the token has no expectedLength) with a strong ETag is cut
    /// at 40 000 of 100 000 bytes. On resume the CDN answers the ETag If-Range with a 200 carrying that same ETag
    /// (quirk detected, dropped unread); between that answer and the bare-Range retry the file is replaced by a
    /// 40 000-byte version, and the server's 416 carries no ETag (nothing
    /// requires validators on a 416). The download
    /// "finishes" with the first 40 000 bytes of the old 100 000-byte version: neither version, a truncated file
    /// reported as a success.
    @Test(
        "Quirk mode: a validator-less 416 to a bare Range is not proof the file is complete",
        arguments: TransportKind.all)
    func quirkBareRange416CallsShortBodyComplete(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let old = testBytes(count: 100_000, seed: 1)
        fixture.serve(.bytes(old, lastModified: nil, behavior: Behavior(chunked: true)))
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 40_000, chunked: true), for: "/file.bin")
        let first = try fixture.download(configuration: DownloadFixture.configuration(retries: 0))
        let token = try #require(await failure(of: first)?.resumeToken)
        #expect(token.offset == 40_000)
        #expect(token.expectedLength == nil, "a chunked body announces no length")
        #expect(token.etag != nil)

        // 1st resume request: If-Range "<etag>" → the CDN's 200 with the same ETag (the quirk), dropped unread.
        fixture.server.enqueue(behavior: Behavior(ifRangeHonorsDatesOnly: true, chunked: true), for: "/file.bin")
        // 2nd (bare Range: bytes=40000-): the file is now a 40 000-byte version; its 416 carries no ETag.
        fixture.server.enqueue(
            ScriptedResponse(status: 416, headers: [HeaderField("Content-Range", "bytes */40000")], text: "no"),
            for: "/file.bin")

        switch await (try fixture.resumeThroughDisk(token)).result {
        case .failure:
            break  // A clear error would be acceptable.
        case .success(let result):
            let bytes = try fixture.contents(of: result.fileURL)
            // The server's old version is 100 000 bytes; whatever the new one is, it is not old[0..<40000]: the file
            // "finished" here is a truncated copy of the old version.
            let isOld = bytes == old
            #expect(isOld, "finished with \(bytes.count) bytes: the first \(bytes.count) of the old version")
        }
        let requests = fixture.server.requests(for: "/file.bin").dropFirst()
        #expect(requests.map { $0.header("If-Range") }.contains(nil), "the retry was a bare Range")
    }

    // MARK: - Finding B: the restart limit on a 200 leaves a token with the new validators over the old bytes

    /// Rule broken: "never splice two versions" — and "a token describes a prefix of the file it names".
    ///
    /// `receiveWhole` calls `adoptValidators(head)` *before* checking `restarts <= maximumRestarts`. When the 11th
    /// restart is refused, the machine still has the bytes of version n on disk (offset K, old tempPath) but the
    /// validators of version n+1. The engine's failure path makes a token of exactly that (offset K > 0), records it
    /// as the checkpoint and attaches it to the error. Resuming it later sends `If-Range: <v(n+1)>`, which the server
    /// (now stable at n+1) honours with a 206 from K, and the finished file is v(n)[0..<K] + v(n+1)[K...].
    ///
    /// Reproduction: a server whose 200s change version on every request and are cut after K bytes (a flapping
    /// origin behind a load balancer), twelve times; then it settles.
    @Test("The restart limit on a 200 never leaves a token whose validators are not those of the bytes on disk")
    func restartLimitTokenSplices() async throws {
        let fixture = try DownloadFixture()
        let length = 50_000
        let cut = 20_000
        for version in 1...12 {
            fixture.server.enqueue(
                ScriptedResponse(
                    status: 200,
                    headers: [HeaderField("ETag", "\"v\(version)\""), HeaderField("Content-Length", "\(length)")],
                    body: testBytes(count: length, seed: UInt64(version)),
                    closeAfterBodyBytes: cut),
                for: "/file.bin")
        }
        fixture.serve(.bytes(testBytes(count: length, seed: 99)))  // never reached by the first task
        // Each restart writes K bytes of the new version into a new file: the offset ends where the request began, so
        // the engine does not count it as progress. Enough retries to reach the restart limit.
        let task = try fixture.download(configuration: DownloadFixture.configuration(retries: 20))
        let error = try #require(await failure(of: task))
        #expect(error.message.contains("restarts"), "\(error)")
        let token = try #require(error.resumeToken)
        let onDisk = try fixture.contents(of: URL(fileURLWithPath: token.tempPath))
        let v11 = testBytes(count: length, seed: 11)
        let v12 = testBytes(count: length, seed: 12)
        // The bytes on disk are version 11's; the token names version 12's ETag.
        #expect(
            !(token.etag == "\"v12\""
                && Array(onDisk.prefix(Int(token.offset))) == Array(v11.prefix(Int(token.offset)))),
            "token says \(token.etag ?? "nil") over \(token.offset) bytes of v11")

        // The origin settles on version 12: the resume joins v11's prefix with v12's tail.
        fixture.serve(.bytes(v12, etag: "\"v12\"", lastModified: nil))
        let result = try await fixture.resumeThroughDisk(token).value
        let isV12 = try fixture.contents(of: result.fileURL) == v12
        #expect(isV12, "spliced: v11[0..<\(token.offset)] + v12[\(token.offset)...]")
    }

    // MARK: - Finding D: a 416-complete result reports the error page's MIME type

    /// Not a byte-level rule, but item 4 of the brief: `DownloadResult.mimeType` is documented as the media type
    /// of the final response; when a resume finds the file complete (416 `bytes */N`), the "final response" is the
    /// server's 416 error page, so an `application/octet-stream` file is reported as `text/html` (and
    /// `responseHeaders` are those of the error page, `Content-Length` the page's).
    @Test("A download finished by a 416 does not report the error page's MIME type as the file's")
    func mimeTypeOf416Complete() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: 5_000)
        fixture.serve(.bytes(content, contentType: "application/zip"))
        let token = try await fixture.interruptedToken(after: 3_000)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: token.tempPath))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(content[3_000...]))
        try handle.close()
        let complete = try ResumeToken(jsonData: patched(token.jsonData(), offset: 5_000))
        let result = try await fixture.resumeThroughDisk(complete).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(result.status == 416)
        #expect(result.mimeType != "text/html", "the finished zip is reported as \(result.mimeType ?? "nil")")
    }
}

// MARK: - Finding C (probe): a connection dropped before the head must stay transient

extension Issue9AttackTests {
    /// Rule at stake: "transient errors leave a token and are retried" — `responseEnded` now retries an error before
    /// a head only when `isTransient`. A server that accepts and closes (a restarting backend behind a balancer), or
    /// one cut in the middle of its head, is a transient network condition on both transports.
    ///
    /// The raw server below answers the first `drops` connections by closing them (after writing `prefix`, possibly
    /// empty), then answers with a correct 200.
    @Test(
        "A connection closed before or inside the response head is retried, on both transports",
        arguments: TransportKind.all, ["", "HTTP/1.1 2"])
    func droppedBeforeHeadIsTransient(transport: TransportKind, prefix: String) async throws {
        try await Self.downloadAfterDroppedConnection(transport: transport, prefix: prefix)
    }

    static func downloadAfterDroppedConnection(transport: TransportKind, prefix: String) async throws {
        let body = testBytes(count: 10_000)
        let server = try RawServer(drops: 1, prefix: Array(prefix.utf8), body: body)
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let configuration = DownloadFixture.configuration(retries: 3, transport: transport)
        let task = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!,
            destination: .directory(directory.url), configuration: configuration)
        switch await task.result {
        case .success(let result):
            try expectSameBytes(Data(contentsOf: result.fileURL), Data(body))
        case .failure(let error):
            Issue.record("a dropped connection (prefix \(prefix.debugDescription)) was not retried: \(error)")
        }
    }
}

/// A minimal TCP server on 127.0.0.1: closes the first `drops` connections after writing `prefix`, then answers
/// every request with a 200 carrying `body`.
private final class RawServer: Sendable {
    let port: UInt16
    private let listener: Int32
    private let stopped = Atomic<Bool>(false)

    init(drops: Int, prefix: [UInt8], body: [UInt8]) throws {
        let (fd, boundPort) = try RawListeningSocket.open()
        port = boundPort
        listener = fd
        let head = Array(
            "HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\nETag: \"raw\"\r\nConnection: close\r\n\r\n".utf8)
        let thread = Thread { [self] in
            var served = 0
            while !stopped.load(ordering: .relaxed) {
                let client = accept(fd, nil, nil)
                if client < 0 { return }
                // Read the request head (best effort).
                var buffer = [UInt8](repeating: 0, count: 8192)
                _ = recv(client, &buffer, buffer.count, 0)
                if served < drops {
                    if !prefix.isEmpty { _ = send(client, prefix, prefix.count, Int32(MSG_NOSIGNAL)) }
                } else {
                    let response = head + body
                    _ = send(client, response, response.count, Int32(MSG_NOSIGNAL))
                }
                served += 1
                shutdown(client, Int32(SHUT_RDWR))
                close(client)
            }
        }
        thread.start()
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
}
