import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Rule 17i: a server that served this run's plain GET with a 200 but turns a range request away (a 400 or a 403,
/// or an answer too malformed to judge) is asked once more without a range, and its 200 is
/// judged as any: a restart from byte 0 into a new file, never a join. Without that, such a server fails a download it
/// serves whole, once a first answer was cut.
@Suite("Range requests turned away after a plain GET served the file (rule 17i)")
struct RangeTurnedAwayTests {
    static let length = 100_000
    static let cut = 40_000

    /// How the server turns a range request away.
    enum Refusal: String, CaseIterable, Sendable, CustomStringConvertible {
        case forbidden
        case status2000
        var description: String { rawValue }

        var answer: [UInt8] {
            switch self {
            case .forbidden: Array("HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".utf8)
            case .status2000: Array("HTTP/1.1 2000 Weird\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".utf8)
            }
        }
    }

    /// A server whose first answer is a 200 of `first` (ETag `"v1"`) cut after ``cut`` bytes; range requests get
    /// `refusal`; later plain GETs get `later` whole (under `laterTag`), or `refusal` too when `later` is nil.
    static func server(
        first: [UInt8], later: [UInt8]?, laterTag: String = "\"v1\"", refusal: Refusal
    ) throws -> RawScriptServer {
        try RawScriptServer { head, index in
            func whole(_ bytes: [UInt8], tag: String) -> [UInt8] {
                RawScriptServer.head(
                    "200 OK", ["Accept-Ranges: bytes", "Content-Length: \(bytes.count)"], etag: Array(tag.utf8))
            }
            if index == 0 { return whole(first, tag: "\"v1\"") + first[0..<cut] }
            guard RawScriptServer.header("Range", in: head) == nil, let later else { return refusal.answer }
            return whole(later, tag: laterTag) + later
        }
    }

    /// A download of the server's file into a new directory, with three retries.
    static func download(
        from server: RawScriptServer, transport: TransportKind
    ) throws -> (DownloadTask, TemporaryDirectory) {
        let directory = try TemporaryDirectory()
        let task = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: DownloadFixture.configuration(retries: 3, transport: transport))
        return (task, directory)
    }

    static func requestKinds(_ server: RawScriptServer) -> [String] {
        server.requests.map { RawScriptServer.header("Range", in: $0) == nil ? "plain" : "range" }
    }

    @Test(
        "A range request turned away after the plain GET was cut: one plain GET more reads the whole file",
        arguments: Refusal.allCases, TransportKind.all)
    func plainGetFinishes(refusal: Refusal, transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 171)
        let server = try Self.server(first: content, later: content, refusal: refusal)
        defer { server.stop() }
        let (task, directory) = try Self.download(from: server, transport: transport)
        let result = try await task.result.get()
        try expectSameBytes([UInt8](Data(contentsOf: result.fileURL)), content)
        #expect(Self.requestKinds(server) == ["plain", "range", "plain"])
        #expect(directory.contents() == ["file.bin"], "no temporary file nor token left")
    }

    @Test(
        "The plain GET after a turned-away range brings another version: the file is that version whole, never a splice",
        arguments: Refusal.allCases, TransportKind.all)
    func otherVersionIsWhole(refusal: Refusal, transport: TransportKind) async throws {
        let old = testBytes(count: Self.length, seed: 172)
        let new = testBytes(count: Self.length, seed: 173)
        let server = try Self.server(first: old, later: new, laterTag: "\"v2\"", refusal: refusal)
        defer { server.stop() }
        let (task, directory) = try Self.download(from: server, transport: transport)
        let result = try await task.result.get()
        let bytes = [UInt8](try Data(contentsOf: result.fileURL))
        expectSameBytes(
            bytes, new, "splice of the old prefix: \(bytes.prefix(Self.cut).elementsEqual(old.prefix(Self.cut)))")
        #expect(result.etag == "\"v2\"")
        #expect(directory.contents() == ["file.bin"])
    }

    @Test(
        "A server that turns the plain GET away too fails the download once, with every byte on disk kept",
        arguments: Refusal.allCases, TransportKind.all)
    func plainGetTurnedAwayKeepsBytes(refusal: Refusal, transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 174)
        let server = try Self.server(first: content, later: nil, refusal: refusal)
        defer { server.stop() }
        let (task, directory) = try Self.download(from: server, transport: transport)
        let error = try #require(await failure(of: task))
        if refusal == .forbidden { #expect(error.httpStatus == 403, "\(error)") }
        // One plain GET more, not a loop: the rule applies once per task.
        #expect(Self.requestKinds(server) == ["plain", "range", "plain"], "\(error)")
        let token = try #require(error.resumeToken, "\(error)")
        #expect(token.offset == Int64(Self.cut))
        #expect(token.etag == "\"v1\"")
        #expect(token.tempPath.hasPrefix(directory.url.path + "/"), "\(token.tempPath)")
        let kept = [UInt8](try Data(contentsOf: URL(fileURLWithPath: token.tempPath)))
        expectSameBytes(kept, Array(content[0..<Self.cut]))
    }

    @Test(
        "A token resumed in a new task whose range request is turned away fails as before: no plain GET it did not see",
        arguments: TransportKind.all)
    func resumedTokenDoesNotFallBack(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 175)
        let server = try Self.server(first: content, later: content, refusal: .forbidden)
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let configuration = DownloadFixture.configuration(retries: 0, transport: transport)
        let first = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        let cut = try #require(await failure(of: first))
        let token = try #require(cut.resumeToken, "\(cut)")
        #expect(token.offset == Int64(Self.cut))
        let resumed = try DownloadTask.resume(from: token, configuration: configuration)
        let error = try #require(await failure(of: resumed))
        #expect(error.httpStatus == 403, "\(error)")
        #expect(Self.requestKinds(server) == ["plain", "range"])
        #expect(error.resumeToken?.offset == Int64(Self.cut), "the bytes on disk stay described")
    }
}
