import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Review of rule 9a (commit 117f691): a restart waits for the new answer's first body byte. These tests attack the
/// instant of the switch (the first piece itself refused, a pause while the switch runs), the multi-connection path
/// that still switches at the head, and check what holds (a cancel while pending, the digest after a reverted
/// restart and a join).
///
/// Tests marked **FAILS on 117f691** prove a break; the others pass.
@Suite("Review: a restart at the new answer's first byte (rule 9a)")
struct RestartAtFirstByteReviewTests {
    static let length = RestartAtFirstByteTests.length
    static let cut = RestartAtFirstByteTests.cut

    /// A flag a `@Sendable` closure can set once.
    final class Once: Sendable {
        private let done = Mutex(false)
        /// True the first time only.
        func first() -> Bool {
            done.withLock { done in
                defer { done = true }
                return !done
            }
        }
    }

    /// Waits for `semaphore` on a thread of its own (never on the cooperative pool), at most 300 s.
    static func wait(_ semaphore: DispatchSemaphore) async -> Bool {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: semaphore.wait(timeout: .now() + 300) == .success) }.start()
        }
    }

    /// A `200` whose chunked body carries all of `content`, under a `Content-Length` of `declared` that the chunks
    /// overrun (RFC 9112 §6.3: the transports frame by the chunks): the machine refuses the very first piece ("the
    /// body runs past its announced end").
    static func chunkedPastLength(_ content: [UInt8], tag: String, declared: Int) -> [UInt8] {
        RawScriptServer.head(
            "200 OK", ["Transfer-Encoding: chunked", "Content-Length: \(declared)"], etag: Array(tag.utf8))
            + Array(String(content.count, radix: 16).utf8) + Array("\r\n".utf8) + content
            + Array("\r\n0\r\n\r\n".utf8)
    }

    /// The first download: a `200` of `old` under `"v1"`, cut after ``cut`` bytes; returns its token.
    static func firstCut(_ server: RawScriptServer, into directory: TemporaryDirectory, transport: TransportKind)
        async throws -> ResumeToken
    {
        let first = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: DownloadFixture.configuration(retries: 0, transport: transport))
        let cut = try #require(await failure(of: first))
        return try #require(cut.resumeToken, "the first cut left no token: \(cut)")
    }

    // MARK: - The first piece refused after the switch

    /// **FAILS on 117f691.** Rule 17i's plain GET is answered `200` under the same `"v1"` (the bytes on disk are that
    /// version's), but its chunked body overruns its `Content-Length: 0`: the machine refuses the first piece and the
    /// download fails. No byte of that answer ever reached a file; yet the switch ran at that first piece, before the
    /// piece was judged, and removed the 40,000 bytes of `"v1"`: the error carries no token (rules 2 and 9a).
    @Test(
        "FAILS on 117f691: rule 17i's plain 200 (same version) whose first piece is refused: the old bytes are kept",
        arguments: TransportKind.all)
    func sameVersionFirstPieceRefused(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 9501)
        let server = try RawScriptServer { head, index in
            switch index {
            case 0: return RestartAtFirstByteTests.whole(content, tag: "\"v1\"", upTo: Self.cut)
            case 1: return RestartAtFirstByteTests.forbidden
            default: return Self.chunkedPastLength(content, tag: "\"v1\"", declared: 0)
            }
        }
        defer { server.stop() }
        let (task, directory) = try RangeTurnedAwayTests.download(from: server, transport: transport)
        defer { withExtendedLifetime(directory) {} }
        let error = try #require(await failure(of: task))
        #expect(RestartAtFirstByteTests.kinds(server) == ["plain", "range", "plain"], "\(error)")
        try RestartAtFirstByteTests.expectOldBytes(error.resumeToken, content, "\(error)")
        #expect(directory.contents().count == 1, "the old temporary file: \(directory.contents())")
    }

    /// **FAILS on 117f691.** The same with a resume answered `200` under `"v2"`: the answer is refused at its first
    /// piece (a hostile or broken answer, never written), and the bytes of `"v1"` go with it.
    @Test(
        "FAILS on 117f691: a resume answered 200 whose first piece is refused: the token still names the old bytes",
        arguments: TransportKind.all)
    func newVersionFirstPieceRefused(transport: TransportKind) async throws {
        let old = testBytes(count: Self.length, seed: 9502)
        let new = testBytes(count: Self.length, seed: 9503)
        let server = try RawScriptServer { head, index in
            if index == 0 { return RestartAtFirstByteTests.whole(old, tag: "\"v1\"", upTo: Self.cut) }
            return Self.chunkedPastLength(new, tag: "\"v2\"", declared: 0)
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let token = try await Self.firstCut(server, into: directory, transport: transport)
        let resumed = try DownloadTask.resume(
            from: token, configuration: DownloadFixture.configuration(retries: 0, transport: transport))
        let error = try #require(await failure(of: resumed))
        #expect(error.code == .protocolViolation, "\(error)")
        try RestartAtFirstByteTests.expectOldBytes(error.resumeToken, old, "\(error)")
        #expect(directory.contents().count == 1, "the old temporary file: \(directory.contents())")
    }

    // MARK: - A pause while the switch runs

    /// **FAILS on 117f691.** The first piece of a `200` of `"v2"` arrives and the switch starts: the token naming the
    /// new, empty file goes to the checkpoint handler, which takes its time (an fsync on a slow disk; here it waits
    /// for the test). The task is paused meanwhile. The switch goes on, removes the 40,000 bytes of `"v1"`, and then
    /// the first piece is not written because of the pause: the paused task leaves no token and no file at all,
    /// neither the old bytes nor a byte of the new answer, although the pause came before any of its bytes was
    /// written (rules 2 and 9a: "paused before its first byte leaves the old file").
    @Test(
        "FAILS on 117f691: a pause while the switch at the first byte runs leaves a token, old bytes or new",
        arguments: TransportKind.all)
    func pauseWhileSwitching(transport: TransportKind) async throws {
        let old = testBytes(count: Self.length, seed: 9504)
        let new = testBytes(count: Self.length + 20_000, seed: 9505)
        let server = try RawScriptServer { head, index in
            if index == 0 { return RestartAtFirstByteTests.whole(old, tag: "\"v1\"", upTo: Self.cut) }
            return RestartAtFirstByteTests.whole(new, tag: "\"v2\"")
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let token = try await Self.firstCut(server, into: directory, transport: transport)
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let once = Once()
        var configuration = DownloadFixture.configuration(retries: 0, transport: transport)
        configuration.checkpointing = DownloadTask.Checkpointing(interval: .seconds(3600)) { token in
            // The switch's token: the new version, no byte yet.
            guard token.etag == "\"v2\"", token.offset == 0, once.first() else { return }
            entered.signal()
            _ = release.wait(timeout: .now() + 300)
        }
        let resumed = try DownloadTask.resume(from: token, configuration: configuration)
        defer { release.signal() }
        #expect(await Self.wait(entered), "the switch never started")
        resumed.requestPause("paused by the test while the switch runs")
        release.signal()
        let error = try #require(await failure(of: resumed))
        #expect(error.code == .paused, "\(error)")
        let kept = try #require(error.resumeToken, "the pause left no token (and no file): \(directory.contents())")
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: kept.tempPath)))
        let version = kept.etag == "\"v1\"" ? old : new
        #expect(kept.offset > 0 && Int(kept.offset) <= bytes.count, "\(kept.offset) of \(bytes.count)")
        expectSameBytes(Array(bytes.prefix(Int(kept.offset))), Array(version.prefix(Int(kept.offset))))
        // The engine undoes a switch a stop came during: the old file and its token, nothing of the new answer.
        #expect(kept.etag == "\"v1\"" && kept.offset == Int64(Self.cut), "\(kept.etag ?? "-") at \(kept.offset)")
        #expect(directory.contents().count == 1, "the old temporary file alone: \(directory.contents())")
    }

    // MARK: - Several connections still switch at the head

    /// **FAILS on 117f691** (the path rule 9a leaves as it was). The mirror of "A resume answered 200 (same version,
    /// ranges ignored) cut before its first byte, then a 206: joined, no restart" with `fixed(4)`: the `200` of
    /// `"v2"` advertises ranges and a length, so it starts a multi-connection phase, and the switch runs at its head;
    /// that answer is cut before its first byte and every other request is turned away (403): the download fails
    /// with no token, the 40,000 bytes of `"v1"` gone although no byte of another version ever arrived. With one
    /// connection (`fixed(1)`, which passes) the same answers leave the old bytes.
    @Test(
        "FAILS on 117f691 with fixed(4): a 200 that starts segments, cut before its first byte: the old bytes are kept",
        arguments: [1, 4])
    func segmentsCutBeforeFirstByte(connections: Int) async throws {
        let old = testBytes(count: Self.length, seed: 9506)
        let server = try RawScriptServer { head, index in
            switch index {
            case 0: return RestartAtFirstByteTests.whole(old, tag: "\"v1\"", upTo: Self.cut)
            case 1: return RestartAtFirstByteTests.whole(old, tag: "\"v2\"", upTo: 0)
            default: return RestartAtFirstByteTests.forbidden
            }
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let token = try await Self.firstCut(server, into: directory, transport: .automatic)
        var configuration = DownloadFixture.configuration(retries: 0)
        configuration.connections = .fixed(connections)
        configuration.minimumSegmentLength = 8 << 10
        let resumed = try DownloadTask.resume(from: token, configuration: configuration)
        let error = try #require(await failure(of: resumed))
        try RestartAtFirstByteTests.expectOldBytes(error.resumeToken, old, "\(error)")
    }

    // MARK: - What holds

    /// Holds: a cancel (discard) while the restart is pending removes the old file and leaves nothing else.
    @Test("Holds: a cancel while the restart is pending leaves no file", arguments: TransportKind.all)
    func cancelWhilePending(transport: TransportKind) async throws {
        let old = testBytes(count: Self.length, seed: 9507)
        let release = DispatchSemaphore(value: 0)
        let server = try RawScriptServer { head, index, send in
            if index == 0 {
                _ = send(RestartAtFirstByteTests.whole(old, tag: "\"v1\"", upTo: Self.cut))
                return .completed(0)
            }
            guard send(RawScriptServer.head("200 OK", ["Content-Length: 5000"], etag: Array("\"v2\"".utf8)))
            else { return .clientLeft(0) }
            _ = release.wait(timeout: .now() + 300)
            return send([UInt8](repeating: 7, count: 5000)) ? .completed(1) : .clientLeft(0)
        }
        defer {
            release.signal()
            server.stop()
        }
        let directory = try TemporaryDirectory()
        let token = try await Self.firstCut(server, into: directory, transport: transport)
        let tokenFile = directory.url.appendingPathComponent("file.bin.token")
        var configuration = DownloadFixture.configuration(retries: 0, transport: transport)
        configuration.checkpointing = .file(tokenFile)
        try token.write(to: tokenFile)
        let resumed = try DownloadTask.resume(from: token, configuration: configuration)
        var judged = false
        for await event in resumed.events {
            if case .progress(let progress) = event, progress.expectedLength == 5000 {
                judged = true
                break
            }
        }
        #expect(judged)
        resumed.cancel()
        let error = try #require(await failure(of: resumed))
        #expect(error.code == .cancelled && error.resumeToken == nil, "\(error)")
        #expect(directory.contents().isEmpty, "left behind: \(directory.contents())")
    }

    /// Holds: with a digest computed, a restart reverted before its first byte, then a `206` of the old version
    /// joined: the digest is the file's, and the file is the server's.
    @Test("Holds: the SHA-256 after a reverted restart and a join is the file's", arguments: TransportKind.all)
    func digestAfterRevertAndJoin(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 9508)
        let server = try RawScriptServer { head, index in
            switch index {
            case 0: return RestartAtFirstByteTests.whole(content, tag: "\"v1\"", upTo: Self.cut)
            case 1: return RestartAtFirstByteTests.whole(content, tag: "\"v2\"", upTo: 0)
            default: return RestartAtFirstByteTests.partial(content, from: Self.cut, tag: "\"v1\"")
            }
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let token = try await Self.firstCut(server, into: directory, transport: transport)
        var configuration = DownloadFixture.configuration(retries: 2, transport: transport)
        configuration.expectedSHA256 = try SHA256Hasher.hex(of: content)
        let result = try await DownloadTask.resume(from: token, configuration: configuration).result.get()
        try expectSameBytes([UInt8](Data(contentsOf: result.fileURL)), content)
        #expect(result.sha256 == (try SHA256Hasher.hex(of: content)))
        #expect(!result.restarted)
        #expect(directory.contents() == ["file.bin"], "\(directory.contents())")
    }

    /// Holds (no endless loop): a server that answers every range request with a restarting `200` head and cuts it
    /// before its first byte: the retries end the download, with the old bytes kept, after a bounded number of
    /// requests.
    @Test("Holds: every resume answered by a 200 head cut before its first byte ends within the retries")
    func endlessRestartHeadsAreBounded() async throws {
        let old = testBytes(count: Self.length, seed: 9509)
        let server = try RawScriptServer { head, index in
            if index == 0 { return RestartAtFirstByteTests.whole(old, tag: "\"v1\"", upTo: Self.cut) }
            return RestartAtFirstByteTests.whole(old, tag: "\"v\(index + 1)\"", upTo: 0)
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let token = try await Self.firstCut(server, into: directory, transport: .automatic)
        let resumed = try DownloadTask.resume(from: token, configuration: DownloadFixture.configuration(retries: 4))
        let error = try #require(await failure(of: resumed))
        #expect(server.requests.count == 1 + 5, "\(server.requests.count) requests: \(error)")
        try RestartAtFirstByteTests.expectOldBytes(error.resumeToken, old, "\(error)")
    }
}
