import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Review of rule 9a (commit 117f691) through the real binary: `get` killed with SIGKILL while held between a
/// restarting answer's head and its first byte, or right after that byte; the token on disk is checked against its
/// file, and `resume` must produce exactly the server's file. These pass on 117f691 (what holds).
@Suite("Review: kill -9 around a restart's first byte, then resume (rule 9a)")
struct RestartAtFirstByteCLIReviewTests {
    static let length = 100_000
    static let cut = 40_000

    /// 0: a `200` of `"v1"` cut at ``cut``; 1 (the retry's range request): the head of a `200` of `"v2"`, then
    /// `firstBytes` bytes of it, then nothing until `release`; from 2 on (the resume): a `200` of `"v2"`, whole.
    static func server(old: [UInt8], new: [UInt8], firstBytes: Int, release: DispatchSemaphore) throws
        -> RawScriptServer
    {
        try RawScriptServer { head, index, send in
            switch index {
            case 0:
                let sent = send(
                    RawScriptServer.head(
                        "200 OK", ["Accept-Ranges: bytes", "Content-Length: \(old.count)"],
                        etag: Array("\"v1\"".utf8)) + old[0..<Self.cut])
                return sent ? .completed(0) : .clientLeft(0)
            case 1:
                let head = RawScriptServer.head(
                    "200 OK", ["Content-Length: \(new.count)"], etag: Array("\"v2\"".utf8))
                guard send(head + new[0..<firstBytes]) else { return .clientLeft(0) }
                _ = release.wait(timeout: .now() + 300)
                return .completed(1)
            default:
                let whole =
                    RawScriptServer.head("200 OK", ["Content-Length: \(new.count)"], etag: Array("\"v2\"".utf8))
                    + new
                return send(whole) ? .completed(2) : .clientLeft(0)
            }
        }
    }

    /// Runs `get --json`, waits for `ready` (given the token file and standard error so far), kills it with SIGKILL,
    /// and returns the token left on disk.
    static func killedGet(
        _ server: RawScriptServer, in scratch: ScratchDirectory, ready: (URL, String) -> Bool
    ) async throws -> ResumeToken {
        let tokenURL = scratch.file("file.bin.resumable.json")
        let process = try await CLIProcess.start(
            ["get", "http://127.0.0.1:\(server.port)/file.bin", "--retries", "3", "--json"], in: scratch.url)
        let reached = try await eventually { ready(tokenURL, process.stderrSoFar) }
        process.send(SIGKILL)
        let killed = try await process.finish()
        try #require(reached, "never reached the instant to kill: \(killed)")
        try #require(killed.signal == SIGKILL, "\(killed)")
        return try ResumeToken(contentsOf: tokenURL)
    }

    /// Checks that every byte `token` covers is in its file and is `content`'s.
    static func expectPrefix(_ token: ResumeToken, of content: [UInt8]) throws {
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: token.tempPath)))
        #expect(Int(token.offset) <= bytes.count, "\(token.offset) of \(bytes.count)")
        expectSameBytes(Array(bytes.prefix(Int(token.offset))), Array(content.prefix(Int(token.offset))))
    }

    @Test("Holds: kill -9 between the new version's head and its first byte: the old token, then resume is exact")
    func killWhilePending() async throws {
        let old = Resource.generatedBytes(seed: 9511, range: 0..<Int64(Self.length))
        let new = Resource.generatedBytes(seed: 9512, range: 0..<Int64(Self.length + 30_000))
        let release = DispatchSemaphore(value: 0)
        let server = try Self.server(old: old, new: new, firstBytes: 0, release: release)
        defer {
            release.signal()
            server.stop()
        }
        let scratch = try ScratchDirectory()
        // The new version's head was judged once a progress event carries its length.
        let token = try await Self.killedGet(server, in: scratch) { _, stderr in
            stderr.contains("\"expectedLength\":\(new.count)")
        }
        // The old version's token: its last checkpoint (a cut is retried without a checkpoint of its own).
        #expect(token.etag == "\"v1\"" && token.offset <= Int64(Self.cut), "\(token)")
        try Self.expectPrefix(token, of: old)
        #expect(scratch.partialFiles().count == 1, "\(scratch.contents())")
        release.signal()
        let resumed = try await CLIProcess.run(
            ["resume", scratch.file("file.bin.resumable.json").path, "--quiet"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        try expectSameBytes([UInt8](Data(contentsOf: scratch.file("file.bin"))), new)
        #expect(scratch.contents() == ["file.bin"], "\(scratch.contents())")
    }

    @Test("Holds: kill -9 right after the new version's first byte: the token names the new file, resume is exact")
    func killAfterFirstByte() async throws {
        let old = Resource.generatedBytes(seed: 9513, range: 0..<Int64(Self.length))
        let new = Resource.generatedBytes(seed: 9514, range: 0..<Int64(Self.length + 30_000))
        let release = DispatchSemaphore(value: 0)
        let server = try Self.server(old: old, new: new, firstBytes: 1, release: release)
        defer {
            release.signal()
            server.stop()
        }
        let scratch = try ScratchDirectory()
        // The switch records a token naming the new file before the old one goes.
        let token = try await Self.killedGet(server, in: scratch) { tokenURL, _ in
            (try? ResumeToken(contentsOf: tokenURL))?.etag == "\"v2\""
        }
        #expect(token.etag == "\"v2\"", "\(token)")
        try Self.expectPrefix(token, of: new)
        release.signal()
        let resumed = try await CLIProcess.run(
            ["resume", scratch.file("file.bin.resumable.json").path, "--quiet"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        try expectSameBytes([UInt8](Data(contentsOf: scratch.file("file.bin"))), new)
        #expect(scratch.contents() == ["file.bin"], "\(scratch.contents())")
    }
}
