import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Second adversarial review of rule 17i (after 52d8f9a): redirects of the plain GET, a shorter 200, a CDN that
/// ignores entity-tag If-Ranges, request counts under alternating refusals and cuts, a pause between the refusal and
/// the plain 200.
@Suite("Review 2: rule 17i's plain GET")
struct RangeTurnedAwaySecondReviewTests {
    static let length = 100_000
    static let cut = 40_000
    static let forbidden = Array("HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".utf8)
    static let malformed = Array("HTTP/1.1 2000 Weird\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".utf8)

    static func whole(_ content: [UInt8], tag: String, upTo: Int? = nil, extra: [String] = []) -> [UInt8] {
        RawScriptServer.head(
            "200 OK", ["Accept-Ranges: bytes", "Content-Length: \(content.count)"] + extra, etag: Array(tag.utf8))
            + content[0..<(upTo ?? content.count)]
    }

    static func partial(_ content: [UInt8], _ range: ClosedRange<Int>, tag: String) -> [UInt8] {
        RawScriptServer.head(
            "206 Partial Content",
            [
                "Accept-Ranges: bytes", "Content-Range: bytes \(range.lowerBound)-\(range.upperBound)/\(content.count)",
                "Content-Length: \(range.count)",
            ],
            etag: Array(tag.utf8)) + content[range]
    }

    static func path(_ head: [UInt8]) -> String {
        let line = String(decoding: head.prefix(while: { $0 != 13 && $0 != 10 }), as: UTF8.self)
        return line.split(separator: " ").dropFirst().first.map(String.init) ?? ""
    }

    static func kinds(_ server: RawScriptServer) -> [String] {
        server.requests.map {
            (RawScriptServer.header("Range", in: $0) == nil ? "plain" : "range") + " " + path($0)
        }
    }

    static func checkToken(_ error: ResumableError, _ content: [UInt8], _ what: String) throws {
        guard let token = error.resumeToken else { return }
        let kept = [UInt8](try Data(contentsOf: URL(fileURLWithPath: token.tempPath)))
        let named = Array(kept.prefix(Int(token.offset)))
        let isServers = named == Array(content.prefix(Int(token.offset)))
        #expect(isServers, "the token names \(token.offset) bytes that are not the server's (\(error)); \(what)")
    }

    @Test(
        "Rule 17i's plain GET redirected to a target answering a 206 from byte 0: never a splice",
        arguments: TransportKind.all)
    func redirectedPlainGetAnswered206(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 941)
        let server = try RawScriptServer { head, index in
            if index == 0 { return Self.whole(content, tag: "\"v1\"", upTo: Self.cut) }
            if RawScriptServer.header("Range", in: head) != nil { return Self.forbidden }
            if Self.path(head) != "/moved" {
                return RawScriptServer.head("302 Found", ["Location: /moved", "Content-Length: 0"])
            }
            return Self.partial(content, 0...(Self.length - Self.cut - 1), tag: "\"v1\"")
        }
        defer { server.stop() }
        let (task, directory) = try RangeTurnedAwayTests.download(from: server, transport: transport)
        defer { withExtendedLifetime(directory) {} }  // the download writes into it
        switch await task.result {
        case .success(let result):
            let bytes = [UInt8](try Data(contentsOf: result.fileURL))
            expectSameBytes(bytes, content, "a finished file that is not the server's; \(Self.kinds(server))")
        case .failure(let error):
            try Self.checkToken(error, content, "\(Self.kinds(server))")
        }
    }

    @Test(
        "Rule 17i's plain GET redirected to a target serving another version (200): the file is that version whole",
        arguments: TransportKind.all)
    func redirectedPlainGetAnsweredOtherVersion(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 942)
        let other = testBytes(count: Self.length, seed: 943)
        let server = try RawScriptServer { head, index in
            if index == 0 { return Self.whole(content, tag: "\"v1\"", upTo: Self.cut) }
            if RawScriptServer.header("Range", in: head) != nil { return Self.forbidden }
            if Self.path(head) != "/moved" {
                return RawScriptServer.head("302 Found", ["Location: /moved", "Content-Length: 0"])
            }
            return Self.whole(other, tag: "\"v2\"")
        }
        defer { server.stop() }
        let (task, directory) = try RangeTurnedAwayTests.download(from: server, transport: transport)
        defer { withExtendedLifetime(directory) {} }  // the download writes into it
        switch await task.result {
        case .success(let result):
            let bytes = [UInt8](try Data(contentsOf: result.fileURL))
            expectSameBytes(bytes, other, "not v2 whole (v1 = \(bytes == content)); \(Self.kinds(server))")
        case .failure(let error):
            Issue.record("failed: \(error); \(Self.kinds(server))")
        }
    }

    @Test(
        "Rule 17i's plain 200 shorter than the first (same ETag): the file is exactly the new bytes, nothing stale",
        arguments: TransportKind.all)
    func shorterPlainAnswer(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 944)
        let shorter = testBytes(count: 25_000, seed: 945)
        let server = try RawScriptServer { head, index in
            if index == 0 { return Self.whole(content, tag: "\"v1\"", upTo: Self.cut) }
            if RawScriptServer.header("Range", in: head) != nil { return Self.forbidden }
            // Same tag (a lying server), shorter: cut at 10,000 first, then whole.
            return index == 2 ? Self.whole(shorter, tag: "\"v1\"", upTo: 10_000) : Self.whole(shorter, tag: "\"v1\"")
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let task = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: DownloadFixture.configuration(retries: 5, transport: transport))
        switch await task.result {
        case .success(let result):
            let bytes = [UInt8](try Data(contentsOf: result.fileURL))
            expectSameBytes(bytes, shorter, "\(bytes.count) bytes, not the 25,000 served; \(Self.kinds(server))")
        case .failure(let error):
            if let token = error.resumeToken {
                let kept = [UInt8](try Data(contentsOf: URL(fileURLWithPath: token.tempPath)))
                expectSameBytes(Array(kept.prefix(Int(token.offset))), Array(shorter.prefix(Int(token.offset))))
            }
        }
    }

    @Test(
        "A CDN ignoring entity-tag If-Range, then 403 to the next range: the plain 200 (v2) is taken whole",
        arguments: TransportKind.all)
    func ignoresEntityTagThen403(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 946)
        let other = testBytes(count: 60_000, seed: 947)
        let server = try RawScriptServer { head, index in
            if index == 0 { return Self.whole(content, tag: "\"v1\"", upTo: Self.cut) }
            if RawScriptServer.header("If-Range", in: head) != nil { return Self.whole(content, tag: "\"v1\"") }
            if RawScriptServer.header("Range", in: head) != nil { return Self.forbidden }
            return Self.whole(other, tag: "\"v2\"")
        }
        defer { server.stop() }
        let (task, directory) = try RangeTurnedAwayTests.download(from: server, transport: transport)
        defer { withExtendedLifetime(directory) {} }  // the download writes into it
        switch await task.result {
        case .success(let result):
            let bytes = [UInt8](try Data(contentsOf: result.fileURL))
            #expect(bytes == other || bytes == content, "a splice; \(Self.kinds(server))")
        case .failure(let error):
            try Self.checkToken(error, content, "\(Self.kinds(server))")
            Issue.record("failed: \(error); \(Self.kinds(server))")
        }
    }

    @Test(
        "403 and malformed answers to ranges alternating with cut plain 200s: the requests stay bounded",
        arguments: TransportKind.all)
    func alternatingRefusalsAndCutsAreBounded(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 948)
        let ranges = Atomic<Int>(0)
        let server = try RawScriptServer { head, index in
            if RawScriptServer.header("Range", in: head) != nil {
                let n = ranges.add(1, ordering: .relaxed).newValue
                return n % 2 == 0 ? Self.malformed : Self.forbidden
            }
            return Self.whole(content, tag: "\"v1\"", upTo: 5_000)
        }
        defer { server.stop() }
        _ = try await Self.boundedRun(server, transport: transport)
    }

    @Test(
        "A pause between the refusal and the plain 200: the token names the old bytes, and a new run resumes them",
        arguments: TransportKind.all)
    func pauseBetweenRefusalAndPlainAnswer(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 949)
        // The plain GET's answer waits until the test has paused: a gate, not a guess at timing.
        let release = DispatchSemaphore(value: 0)
        let server = try RawScriptServer { head, index in
            if index == 0 { return Self.whole(content, tag: "\"v1\"", upTo: Self.cut) }
            if index == 1 { return Self.forbidden }
            if index == 2 {
                release.wait()
                return Self.whole(content, tag: "\"v1\"")
            }
            if let range = RawScriptServer.header("Range", in: head) {
                let text = String(decoding: range, as: UTF8.self)
                let from = Int(text.dropFirst("bytes=".count).split(separator: "-").first ?? "0") ?? 0
                return Self.partial(content, from...(content.count - 1), tag: "\"v1\"")
            }
            return Self.whole(content, tag: "\"v1\"")
        }
        defer {
            release.signal()
            server.stop()
        }
        let directory = try TemporaryDirectory()
        let configuration = DownloadFixture.configuration(retries: 3, transport: transport)
        let task = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        // 300 s: the suite's bound on an endless wait, never reached by a working client.
        let deadline = ContinuousClock.now + .seconds(300)
        while server.requests.count < 3 && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        try #require(server.requests.count >= 3, "\(Self.kinds(server))")
        let token = try #require(await task.cancelProducingResumeData(), "no token; \(Self.kinds(server))")
        release.signal()
        let kept = [UInt8](try Data(contentsOf: URL(fileURLWithPath: token.tempPath)))
        #expect(token.offset == Int64(Self.cut), "offset \(token.offset)")
        expectSameBytes(Array(kept.prefix(Int(token.offset))), Array(content.prefix(Int(token.offset))))
        let resumed = try DownloadTask.resume(from: token, configuration: configuration)
        switch await resumed.result {
        case .success(let result):
            let bytes = [UInt8](try Data(contentsOf: result.fileURL))
            expectSameBytes(bytes, content, "\(Self.kinds(server))")
        case .failure(let error):
            Issue.record("resume failed: \(error); \(Self.kinds(server))")
        }
        let kinds = Self.kinds(server)
        #expect(kinds.count >= 4 && kinds[3].hasPrefix("range"), "the resume asked \(kinds)")
    }
    @Test(
        "403s to ranges alternating with plain 200s cut after real progress (200 KB): bounded by the restart limit",
        arguments: TransportKind.all)
    func refusalsWithProgressAreBoundedByRestarts(transport: TransportKind) async throws {
        let content = testBytes(count: 1_000_000, seed: 950)
        let server = try RawScriptServer { head, index in
            if RawScriptServer.header("Range", in: head) != nil {
                return index % 4 == 1 ? Self.forbidden : Self.malformed
            }
            return Self.whole(content, tag: "\"v1\"", upTo: 200_000)
        }
        defer { server.stop() }
        let (result, directory) = try await Self.boundedRun(server, transport: transport)
        defer { withExtendedLifetime(directory) {} }  // the token's temporary file is in it
        if case .failure(let error) = result { try Self.checkToken(error, content, "") }
    }

    /// Downloads from `server` (cancelled after 300 s, a bound only on an endless loop), checks that the requests
    /// stayed bounded and that no file was finished, and returns the result with the directory the download wrote
    /// into (a token's temporary file lives there as long as the caller keeps it).
    static func boundedRun(
        _ server: RawScriptServer, transport: TransportKind
    ) async throws -> (Result<DownloadResult, ResumableError>, TemporaryDirectory) {
        let (task, directory) = try RangeTurnedAwayTests.download(from: server, transport: transport)
        let watchdog = Task {
            try await Task.sleep(for: .seconds(300))
            task.cancel()
        }
        let result = await task.result
        watchdog.cancel()
        let count = server.requests.count
        #expect(count <= 3 * (ResumeStateMachine.maximumRestarts + 2), "\(count) requests: \(Self.kinds(server))")
        if case .success = result { Issue.record("finished a file never served whole") }
        return (result, directory)
    }
}
