import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Adversarial review of rule 17i: the plain GET sent after a range request was turned away, while bytes stay on
/// disk, is a request without a range: whatever answers it must never be written at the offset of the bytes on disk.
@Suite("Review: the plain GET of rule 17i answered with a 206")
struct RangeTurnedAwayReviewTests {
    static let length = 100_000
    static let cut = 40_000

    static func partial(_ content: [UInt8], _ range: ClosedRange<Int>, tag: String = "\"v1\"") -> [UInt8] {
        RawScriptServer.head(
            "206 Partial Content",
            [
                "Accept-Ranges: bytes", "Content-Range: bytes \(range.lowerBound)-\(range.upperBound)/\(content.count)",
                "Content-Length: \(range.count)",
            ],
            etag: Array(tag.utf8)) + content[range]
    }

    /// First answer: a 200 (ETag "v1") cut after `cut` bytes. Range requests: 403 until `honorRangesFrom` requests
    /// were made, then a correct 206. Later plain GETs: `plainAnswer`.
    static func server(
        content: [UInt8], honorRangesFrom: Int = .max, plainAnswer: @escaping @Sendable () -> [UInt8]
    ) throws -> RawScriptServer {
        try RawScriptServer { head, index in
            if index == 0 {
                return RawScriptServer.head(
                    "200 OK", ["Accept-Ranges: bytes", "Content-Length: \(content.count)"], etag: Array("\"v1\"".utf8))
                    + content[0..<cut]
            }
            guard let range = RawScriptServer.header("Range", in: head) else { return plainAnswer() }
            guard index >= honorRangesFrom else {
                return Array("HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".utf8)
            }
            // "bytes=N-"
            let text = String(decoding: range, as: UTF8.self)
            let from = Int(text.dropFirst("bytes=".count).split(separator: "-").first ?? "0") ?? 0
            return partial(content, from...(content.count - 1))
        }
    }

    static func requestKinds(_ server: RawScriptServer) -> [String] {
        server.requests.map { RawScriptServer.header("Range", in: $0) == nil ? "plain" : "range" }
    }

    @Test(
        "The plain GET after a turned-away range answered 206 from byte 0 (same ETag): never written at the old offset",
        arguments: TransportKind.all)
    func partialFromZeroIsNotSpliced(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 931)
        // A 206 of the first length-cut bytes: it starts at 0, as asked (nothing was asked), and fits exactly behind
        // the 40,000 bytes on disk.
        let server = try Self.server(content: content) { Self.partial(content, 0...(Self.length - Self.cut - 1)) }
        defer { server.stop() }
        let (task, directory) = try RangeTurnedAwayTests.download(from: server, transport: transport)
        defer { withExtendedLifetime(directory) {} }  // the download writes into it
        switch await task.result {
        case .success(let result):
            let bytes = [UInt8](try Data(contentsOf: result.fileURL))
            let spliced = Array(content[0..<Self.cut]) + Array(content[0..<(Self.length - Self.cut)])
            let exact = bytes == content
            #expect(exact, "a finished file that is not the server's: splice = \(bytes == spliced)")
        case .failure(let error):
            // Failing is fine; the bytes the token names must be the server's.
            if let token = error.resumeToken {
                let kept = [UInt8](try Data(contentsOf: URL(fileURLWithPath: token.tempPath)))
                let named = Array(kept.prefix(Int(token.offset)))
                let isServers = named == Array(content.prefix(Int(token.offset)))
                #expect(
                    isServers,
                    "the token names \(token.offset) bytes that are not the server's (\(error)); requests \(Self.requestKinds(server))"
                )
            }
        }
        #expect(Array(Self.requestKinds(server).prefix(3)) == ["plain", "range", "plain"])
    }

    @Test(
        "The plain GET after a turned-away range answered with the whole file as a 206: the token never names a splice",
        arguments: TransportKind.all)
    func wholePartialLeavesNoSplicedToken(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 932)
        // Requests: 0 the cut 200, 1 the turned-away range, 2 the plain GET (a 206 of the whole file), then a resume
        // whose range request (index 3 on) is honored.
        let server = try Self.server(content: content, honorRangesFrom: 3) {
            Self.partial(content, 0...(Self.length - 1))
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let configuration = DownloadFixture.configuration(retries: 3, transport: transport)
        let task = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        var finished: [UInt8]?
        switch await task.result {
        case .success(let result):
            finished = [UInt8](try Data(contentsOf: result.fileURL))
        case .failure(let error):
            let token = try #require(error.resumeToken, "\(error)")
            let kept = [UInt8](try Data(contentsOf: URL(fileURLWithPath: token.tempPath)))
            let isServers = Array(kept.prefix(Int(token.offset))) == Array(content.prefix(Int(token.offset)))
            #expect(
                isServers,
                "the token names \(token.offset) bytes that are not the server's (\(error))")
            // A resume, whose range request the server now honors, joins those bytes.
            let resumed = try DownloadTask.resume(from: token, configuration: configuration)
            switch await resumed.result {
            case .success(let result): finished = [UInt8](try Data(contentsOf: result.fileURL))
            case .failure(let error): Issue.record("the resume failed: \(error)")
            }
        }
        if let finished {
            let exact = finished == content
            #expect(exact, "a finished file that is not the server's; requests \(Self.requestKinds(server))")
        }
    }

    @Test(
        "The plain GET after a turned-away range answered with a chunked 206 from byte 0: the task never finishes a splice",
        arguments: TransportKind.all)
    func chunkedPartialFromZeroNeverFinishesASplice(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 933)
        let rest = Self.length - Self.cut
        // `bytes 0-99999/100000`, chunked, whose body (the first 60,000 bytes) ends early but well framed: what the
        // machine writes behind the 40,000 bytes on disk reaches the announced end exactly.
        let server = try Self.server(content: content) {
            RawScriptServer.head(
                "206 Partial Content",
                [
                    "Accept-Ranges: bytes", "Content-Range: bytes 0-\(Self.length - 1)/\(Self.length)",
                    "Transfer-Encoding: chunked",
                ],
                etag: Array("\"v1\"".utf8)) + Array(String(rest, radix: 16).utf8) + Array("\r\n".utf8)
                + content[0..<rest] + Array("\r\n0\r\n\r\n".utf8)
        }
        defer { server.stop() }
        let (task, directory) = try RangeTurnedAwayTests.download(from: server, transport: transport)
        defer { withExtendedLifetime(directory) {} }  // the download writes into it
        if case .success(let result) = await task.result {
            let bytes = [UInt8](try Data(contentsOf: result.fileURL))
            let spliced = Array(content[0..<Self.cut]) + Array(content[0..<rest])
            let exact = bytes == content
            #expect(
                exact,
                "finished a file that is not the server's (old prefix + the 206's first bytes: \(bytes == spliced)); requests \(Self.requestKinds(server))"
            )
        }
    }

    @Test(
        "One 403 to a range request: a later cut of the plain GET's 200 is resumed with a range, not thrown away",
        arguments: TransportKind.all)
    func laterCutIsResumed(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 934)
        let secondCut = 90_000
        // 0: a 200 cut at 40,000; 1: the range request turned away once; 2: the plain GET's 200 cut at 90,000;
        // from 3 on the server honors ranges (a correct 206) and serves plain GETs whole.
        let plainCount = Mutex(0)
        let server = try Self.server(content: content, honorRangesFrom: 3) {
            let index = plainCount.withLock { count in
                count += 1
                return count
            }
            let head = RawScriptServer.head(
                "200 OK", ["Accept-Ranges: bytes", "Content-Length: \(content.count)"], etag: Array("\"v1\"".utf8))
            return index == 1 ? head + content[0..<secondCut] : head + content
        }
        defer { server.stop() }
        let (task, directory) = try RangeTurnedAwayTests.download(from: server, transport: transport)
        defer { withExtendedLifetime(directory) {} }  // the download writes into it
        let result = try await task.result.get()
        let exact = [UInt8](try Data(contentsOf: result.fileURL)) == content
        #expect(exact)
        let kinds = Self.requestKinds(server)
        #expect(
            kinds == ["plain", "range", "plain", "range"],
            "the 90,000 bytes of the fallback's 200 were dropped although nothing refused them: \(kinds), \(result.bytesTransferred) bytes transferred"
        )
    }
}
