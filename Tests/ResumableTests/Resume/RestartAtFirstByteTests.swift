import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// A restart (a `200` that drops the bytes on disk) switches to a new temporary file at that answer's first body byte,
/// not at its head: an answer cut, refused or paused before its first byte leaves the old file and the token naming it
/// as they were (rule 9, "nothing downloaded is lost without need"; the open finding of rule 17i).
@Suite("A restart takes the old file's place at the new answer's first byte")
struct RestartAtFirstByteTests {
    static let length = 100_000
    static let cut = 40_000
    static let forbidden = Array("HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".utf8)

    static func whole(_ content: [UInt8], tag: String, upTo: Int? = nil) -> [UInt8] {
        RawScriptServer.head(
            "200 OK", ["Accept-Ranges: bytes", "Content-Length: \(content.count)"], etag: Array(tag.utf8))
            + content[0..<(upTo ?? content.count)]
    }

    static func partial(_ content: [UInt8], from: Int, tag: String) -> [UInt8] {
        RawScriptServer.head(
            "206 Partial Content",
            [
                "Content-Range: bytes \(from)-\(content.count - 1)/\(content.count)",
                "Content-Length: \(content.count - from)",
            ],
            etag: Array(tag.utf8)) + content[from...]
    }

    static func kinds(_ server: RawScriptServer) -> [String] {
        server.requests.map { RawScriptServer.header("Range", in: $0) == nil ? "plain" : "range" }
    }

    /// Checks that `token` names the first ``cut`` bytes of `content` under `"v1"`, in a file that holds them.
    static func expectOldBytes(_ token: ResumeToken?, _ content: [UInt8], _ context: String) throws {
        let token = try #require(token, "no token: \(context)")
        #expect(token.offset == Int64(Self.cut), "offset \(token.offset): \(context)")
        #expect(token.etag == "\"v1\"", "\(token.etag ?? "no ETag"): \(context)")
        let kept = [UInt8](try Data(contentsOf: URL(fileURLWithPath: token.tempPath)))
        expectSameBytes(kept, Array(content[0..<Self.cut]), "\(kept.count) bytes kept: \(context)")
    }

    @Test(
        "Rule 17i: the plain 200 cut before its first byte, then the plain GET turned away: the old bytes are kept",
        arguments: TransportKind.all)
    func plainAnswerCutBeforeFirstByte(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 951)
        let server = try RawScriptServer { head, index in
            switch index {
            case 0: return Self.whole(content, tag: "\"v1\"", upTo: Self.cut)
            case 2: return Self.whole(content, tag: "\"v1\"", upTo: 0)
            default: return Self.forbidden
            }
        }
        defer { server.stop() }
        let (task, directory) = try RangeTurnedAwayTests.download(from: server, transport: transport)
        defer { withExtendedLifetime(directory) {} }  // the token's temporary file is in it
        let error = try #require(await failure(of: task))
        #expect(error.httpStatus == 403, "\(error)")
        #expect(Self.kinds(server) == ["plain", "range", "plain", "plain"], "\(error)")
        try Self.expectOldBytes(error.resumeToken, content, "\(error)")
        #expect(directory.contents().count == 1, "one temporary file, no empty one beside it: \(directory.contents())")
    }

    @Test(
        "Rule 17i: the plain 200 cut before its first byte, then served whole: the file is the server's",
        arguments: TransportKind.all)
    func plainAnswerCutThenServed(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 952)
        let server = try RawScriptServer { head, index in
            switch index {
            case 0: return Self.whole(content, tag: "\"v1\"", upTo: Self.cut)
            case 1: return Self.forbidden
            case 2: return Self.whole(content, tag: "\"v1\"", upTo: 0)
            default: return Self.whole(content, tag: "\"v1\"")
            }
        }
        defer { server.stop() }
        let (task, directory) = try RangeTurnedAwayTests.download(from: server, transport: transport)
        let result = try await task.result.get()
        try expectSameBytes([UInt8](Data(contentsOf: result.fileURL)), content)
        #expect(result.restarted)
        #expect(Self.kinds(server) == ["plain", "range", "plain", "plain"])
        #expect(directory.contents() == ["file.bin"], "no temporary file nor token left")
    }

    @Test(
        "A resume answered 200 with another version, paused before its first byte: the token still names the old bytes",
        arguments: TransportKind.all)
    func pausedBeforeFirstByteOfNewVersion(transport: TransportKind) async throws {
        let old = testBytes(count: Self.length, seed: 953)
        let new = testBytes(count: Self.length + 20_000, seed: 954)
        let release = DispatchSemaphore(value: 0)
        let server = try RawScriptServer { head, index, send in
            if index == 0 {
                _ = send(Self.whole(old, tag: "\"v1\"", upTo: Self.cut))
                return .completed(0)
            }
            // The new version's head, then nothing until the test has paused.
            guard send(RawScriptServer.head("200 OK", ["Content-Length: \(new.count)"], etag: Array("\"v2\"".utf8)))
            else { return .clientLeft(0) }
            release.wait()
            return send(new) ? .completed(1) : .clientLeft(0)
        }
        defer {
            release.signal()
            server.stop()
        }
        try await Self.pauseAtNewHead(
            server, configuration: DownloadFixture.configuration(retries: 0, transport: transport), old: old,
            newLength: new.count)
    }

    /// Downloads from `server` until its first answer (of `old`) is cut, resumes the token with `configuration`,
    /// pauses once the resume's answer (a `200` of `newLength` bytes, held after its head) was judged, and checks that
    /// the token still names the old bytes, alone in the directory.
    static func pauseAtNewHead(
        _ server: RawScriptServer, configuration: DownloadTask.Configuration, old: [UInt8], newLength: Int
    ) async throws {
        let directory = try TemporaryDirectory()
        let first = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        let cut = try #require(await failure(of: first))
        try expectOldBytes(cut.resumeToken, old, "after the cut: \(cut)")
        let resumed = try DownloadTask.resume(from: try #require(cut.resumeToken), configuration: configuration)
        // The new version's head was judged once a progress event carries its length.
        var judged = false
        for await event in resumed.events {
            if case .progress(let progress) = event, progress.expectedLength == Int64(newLength) {
                judged = true
                break
            }
        }
        #expect(judged)
        let token = await resumed.cancelProducingResumeData()
        try expectOldBytes(token, old, "after the pause")
        #expect(directory.contents().count == 1, "one temporary file: \(directory.contents())")
    }

    @Test(
        "A resume answered 200 with an empty new version: the empty file is finished, nothing else is left",
        arguments: TransportKind.all)
    func emptyNewVersionFinishes(transport: TransportKind) async throws {
        let old = testBytes(count: Self.length, seed: 955)
        let server = try RawScriptServer { head, index in
            if index == 0 { return Self.whole(old, tag: "\"v1\"", upTo: Self.cut) }
            return Self.whole([], tag: "\"v2\"")
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let configuration = DownloadFixture.configuration(retries: 0, transport: transport)
        let first = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        let cut = try #require(await failure(of: first))
        let resumed = try DownloadTask.resume(from: try #require(cut.resumeToken), configuration: configuration)
        let result = try await resumed.result.get()
        #expect(try Data(contentsOf: result.fileURL).isEmpty)
        #expect(result.restarted)
        #expect(result.etag == "\"v2\"")
        #expect(directory.contents() == ["file.bin"], "no temporary file left: \(directory.contents())")
    }

    @Test(
        "A resume answered 200 with an empty new version its expected SHA-256 rules out: fails, the old bytes kept",
        arguments: TransportKind.all)
    func emptyNewVersionWithOtherDigestKeepsOldBytes(transport: TransportKind) async throws {
        let old = testBytes(count: Self.length, seed: 961)
        let server = try RawScriptServer { head, index in
            if index == 0 { return Self.whole(old, tag: "\"v1\"", upTo: Self.cut) }
            return Self.whole([], tag: "\"v2\"")
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        var configuration = DownloadFixture.configuration(retries: 0, transport: transport)
        configuration.expectedSHA256 = try SHA256Hasher.hex(of: old)
        let first = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        let cut = try #require(await failure(of: first))
        let resumed = try DownloadTask.resume(from: try #require(cut.resumeToken), configuration: configuration)
        let error = try #require(await failure(of: resumed))
        #expect(error.code == .checksumMismatch, "\(error)")
        try Self.expectOldBytes(error.resumeToken, old, "\(error)")
        #expect(directory.contents().count == 1, "the old temporary file alone: \(directory.contents())")
    }

    @Test(
        "A resume answered 200 (same version, ranges ignored) cut before its first byte, then a 206: joined, no restart",
        arguments: TransportKind.all)
    func ignoredRangeCutThenJoined(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 956)
        let server = try RawScriptServer { head, index in
            switch index {
            case 0: return Self.whole(content, tag: "\"v1\"", upTo: Self.cut)
            case 1: return Self.whole(content, tag: "\"v2\"", upTo: 0)
            default: return Self.partial(content, from: Self.cut, tag: "\"v1\"")
            }
        }
        defer { server.stop() }
        let (task, directory) = try RangeTurnedAwayTests.download(from: server, transport: transport)
        let result = try await task.result.get()
        try expectSameBytes([UInt8](Data(contentsOf: result.fileURL)), content)
        #expect(!result.restarted, "the old bytes were dropped although no byte of the other answer arrived")
        #expect(Self.kinds(server) == ["plain", "range", "range"])
        #expect(directory.contents() == ["file.bin"])
    }
    // MARK: - Answers that start several connections

    /// Answers a range request `bytes=a-b` or `bytes=a-` from `content` under `tag` (If-Range not checked).
    static func ranged(_ head: [UInt8], _ content: [UInt8], tag: String) -> [UInt8] {
        guard let range = RawScriptServer.header("Range", in: head) else { return whole(content, tag: tag) }
        let bounds = String(decoding: range, as: UTF8.self).dropFirst("bytes=".count).split(
            separator: "-", omittingEmptySubsequences: false)
        let from = Int(bounds.first ?? "") ?? 0
        let to = bounds.count > 1 ? Int(bounds[1]) ?? content.count - 1 : content.count - 1
        guard from <= to, to < content.count else { return forbidden }
        return RawScriptServer.head(
            "206 Partial Content",
            [
                "Accept-Ranges: bytes", "Content-Range: bytes \(from)-\(to)/\(content.count)",
                "Content-Length: \(to - from + 1)",
            ],
            etag: Array(tag.utf8)) + content[from...to]
    }

    /// The first GET's answer, cut after ``cut`` bytes: a 200 of `content` under `"v1"` that does not advertise ranges,
    /// so the first run reads it on one connection.
    static func firstAnswer(_ content: [UInt8]) -> [UInt8] {
        RawScriptServer.head("200 OK", ["Content-Length: \(content.count)"], etag: Array("\"v1\"".utf8))
            + content[0..<Self.cut]
    }

    @Test(
        "fixed(4): a resume answered 200 with another version cut before its first byte, then 206s: joined, no restart",
        arguments: TransportKind.all)
    func segmentedRestartCutThenJoined(transport: TransportKind) async throws {
        let content = testBytes(count: 2 << 20, seed: 957)
        let other = testBytes(count: 2 << 20, seed: 958)
        let server = try RawScriptServer { head, index in
            switch index {
            case 0: return Self.firstAnswer(content)
            case 1: return Self.whole(other, tag: "\"v2\"", upTo: 0)
            default: return Self.ranged(head, content, tag: "\"v1\"")
            }
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        var configuration = Segmented.configuration(.fixed(4))
        configuration.transport = transport
        let task = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        let result = try await task.result.get()
        try expectSameBytes([UInt8](Data(contentsOf: result.fileURL)), content)
        #expect(!result.restarted, "the old bytes were dropped although no byte of the other answer arrived")
        #expect(Self.kinds(server).prefix(3) == ["plain", "range", "range"], "\(Self.kinds(server))")
        #expect(Self.kinds(server).count > 3, "the rest came on several connections: \(Self.kinds(server))")
        #expect(directory.contents() == ["file.bin"])
    }

    @Test(
        "fixed(4): a resume answered 200 with another version, paused before its first byte: the old bytes are kept",
        arguments: TransportKind.all)
    func segmentedRestartPausedBeforeFirstByte(transport: TransportKind) async throws {
        let old = testBytes(count: 2 << 20, seed: 959)
        let new = testBytes(count: (2 << 20) + 20_000, seed: 960)
        let release = DispatchSemaphore(value: 0)
        let server = try RawScriptServer { head, index, send in
            if index == 0 {
                _ = send(Self.firstAnswer(old))
                return .completed(0)
            }
            if index > 1 { return send(Self.ranged(head, new, tag: "\"v2\"")) ? .completed(2) : .clientLeft(0) }
            guard
                send(
                    RawScriptServer.head(
                        "200 OK", ["Accept-Ranges: bytes", "Content-Length: \(new.count)"], etag: Array("\"v2\"".utf8)))
            else { return .clientLeft(0) }
            release.wait()
            return send(new) ? .completed(1) : .clientLeft(0)
        }
        defer {
            release.signal()
            server.stop()
        }
        var configuration = Segmented.configuration(.fixed(4), retries: 0)
        configuration.transport = transport
        try await Self.pauseAtNewHead(server, configuration: configuration, old: old, newLength: new.count)
        #expect(Self.kinds(server) == ["plain", "range"], "no other connection before the first byte")
    }
}
