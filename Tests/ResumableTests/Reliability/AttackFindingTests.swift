import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Regression tests for the findings of the outside review (issue #8): each failed on the `main` it was
/// filed against.
@Suite("Findings of the review under attack")
struct AttackFindingTests {
    // MARK: Finding 2: a token can write anywhere

    /// A token as an attacker writes it: its destination is a file the victim owns, its temporary file
    /// (which does not exist) sits beside it.
    static func hostileToken(destination: URL, url: URL, offset: Int64 = 10) -> ResumeToken {
        let directory = destination.deletingLastPathComponent().path
        return ResumeToken(
            url: url, originalURL: url, offset: offset, expectedLength: 100, etag: "\"a\"", lastModified: nil,
            responseDate: nil, acceptRanges: "bytes",
            tempPath: (directory as NSString).appendingPathComponent(TemporaryFileName.make()),
            suggestedFilename: "file.bin", destination: destination.path, headers: [:], createdAt: Date(),
            updatedAt: Date())
    }

    @Test(
        "A token naming a file that is not a download of ours writes nothing there, even with overwrite",
        arguments: [DownloadTask.ExistingFilePolicy.overwrite, .chooseFreeName, .fail])
    func hostileDestination(policy: DownloadTask.ExistingFilePolicy) async throws {
        let fixture = try DownloadFixture()
        let url = fixture.serve(.bytes(testBytes(count: 100)))
        let victim = fixture.directory.url.appendingPathComponent("ssh", isDirectory: true)
        try FileManager.default.createDirectory(at: victim, withIntermediateDirectories: true)
        let keys = victim.appendingPathComponent("authorized_keys")
        try Data("ssh-ed25519 AAAA victim\n".utf8).write(to: keys)
        let token = Self.hostileToken(destination: keys, url: url)
        var configuration = DownloadFixture.configuration(existingFile: policy)
        configuration.transport = .libcurl
        let error = #expect(throws: ResumableError.self) {
            try DownloadTask.resume(from: token, configuration: configuration)
        }
        #expect(error?.code == .destinationRequired)
        #expect(error?.message.contains("choose where the file goes") == true)
        #expect(try String(contentsOf: keys, encoding: .utf8) == "ssh-ed25519 AAAA victim\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: victim.path) == ["authorized_keys"])
        #expect(fixture.server.requests.isEmpty, "nothing was even asked for")
    }

    @Test("Overwrite never applies to a destination that only the token named")
    func overwriteNeedsTheCallersDestination() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: 10_000)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 4000)
        let existing = fixture.directory.url.appendingPathComponent("file.bin")
        try Data("keep me".utf8).write(to: existing)
        let result = try await DownloadTask.resume(
            from: token, configuration: DownloadFixture.configuration(existingFile: .overwrite)
        ).value
        #expect(try String(contentsOf: existing, encoding: .utf8) == "keep me")
        #expect(result.fileURL.lastPathComponent == "file (1).bin")
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
    }

    @Test("With the caller's destination, overwrite applies")
    func overwriteWithCallersDestination() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: 10_000)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 4000)
        let existing = fixture.directory.url.appendingPathComponent("file.bin")
        try Data("replace me".utf8).write(to: existing)
        let result = try await DownloadTask.resume(
            from: token, destination: .file(existing),
            configuration: DownloadFixture.configuration(existingFile: .overwrite)
        ).value
        #expect(result.fileURL.path == existing.path)
        try expectSameBytes(fixture.contents(of: existing), content)
    }

    // MARK: Finding 4: stored headers lost after the first resume

    @Test("Request headers survive every resume, not only the first", arguments: TransportKind.all)
    func headersSurviveResumes(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 30_000)
        fixture.serve(.bytes(content))
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 5000), for: "/file.bin")
        let first = try fixture.download(
            configuration: DownloadFixture.configuration(retries: 0, headers: ["Accept": "application/x-test"]))
        let firstToken = try #require(await failure(of: first)?.resumeToken)
        #expect(firstToken.headers["Accept"] == "application/x-test")
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 5000), for: "/file.bin")
        let second = try fixture.resumeThroughDisk(firstToken, configuration: DownloadFixture.configuration(retries: 0))
        let secondToken = try #require(await failure(of: second)?.resumeToken)
        #expect(secondToken.offset == 10_000)
        #expect(secondToken.headers["Accept"] == "application/x-test", "the second token keeps the header")
        let result = try await fixture.resumeThroughDisk(secondToken).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(
            fixture.server.requests(for: "/file.bin").map { $0.header("Accept") }
                == Array(repeating: "application/x-test", count: 3))
    }

    // MARK: Finding 5: a 202 body replaced the download

    @Test(
        "Only 200, 203 and 206 carry the file: any other 2xx is a permanent error that keeps the token and the bytes",
        arguments: [202, 204, 205, 207, 226])
    func otherSuccessStatuses(status: Int) async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: 10_000)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 4000)
        fixture.server.enqueue(ScriptedResponse(status: status, text: "queued, come back later"), for: "/file.bin")
        let error = try #require(await failure(of: try fixture.resumeThroughDisk(token)))
        #expect(error.code == .httpStatus)
        #expect(error.httpStatus == status)
        #expect(!error.isTransient)
        let kept = try #require(error.resumeToken, "the bytes on disk are still resumable")
        #expect(kept.offset == 4000)
        #expect(kept.tempPath == token.tempPath)
        try expectSameBytes(Array(fixture.contents(of: URL(fileURLWithPath: kept.tempPath))), Array(content[0..<4000]))
        #expect(!fixture.directory.contents().contains("file.bin"))
    }

    // MARK: Finding 10: finishing windows

    /// A finished download of 10,000 bytes and the last token its checkpoint handler received: what a crash
    /// right after the move leaves on disk.
    static func finishedDownload() async throws -> (DownloadFixture, DownloadResult, ResumeToken) {
        let fixture = try DownloadFixture()
        fixture.serve(.bytes(testBytes(count: 10_000)))
        let recorded = TokenLog()
        var configuration = DownloadFixture.configuration()
        configuration.checkpointing = DownloadTask.Checkpointing(interval: .seconds(3600)) { recorded.append($0) }
        let result = try await fixture.download(configuration: configuration).value
        return (fixture, result, try #require(recorded.tokens.last))
    }

    @Test("A crash after the finished file was moved leaves a token that says 'already finished', never a second copy")
    func crashAfterMove() async throws {
        let (fixture, result, last) = try await Self.finishedDownload()
        #expect(last.offset == 10_000 && last.expectedLength == 10_000)
        fixture.server.clearRequests()
        let error = #expect(throws: ResumableError.self) {
            try DownloadTask.resume(from: last, configuration: DownloadFixture.configuration())
        }
        #expect(error?.code == .tokenGone)
        #expect(error?.message.contains("already finished") == true)
        #expect(fixture.server.requests.isEmpty)
        #expect(fixture.directory.contents() == [result.fileURL.lastPathComponent])
    }

    @Test("A crash between link and unlink while finishing is recognized as finished, and the stray name removed")
    func crashBetweenLinkAndUnlink() async throws {
        let (fixture, result, last) = try await Self.finishedDownload()
        let content = testBytes(count: 10_000)
        // Rebuild the state a crash after link(2) and before unlink(2) leaves: two names for one inode.
        #expect(link(result.fileURL.path, last.tempPath) == 0)
        let error = #expect(throws: ResumableError.self) {
            try DownloadTask.resume(from: last, configuration: DownloadFixture.configuration())
        }
        #expect(error?.code == .tokenGone)
        #expect(!FileManager.default.fileExists(atPath: last.tempPath), "the stray name is removed")
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.directory.contents() == [result.fileURL.lastPathComponent])
    }

    // MARK: Finding 1: a failed token write stops the download

    @Test("A checkpoint that cannot be written stops the download; it never continues unrecorded")
    func failedCheckpointStops() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: 400_000)
        let gate = fixture.serveHeld(.bytes(content), after: 100_000)
        struct Refused: Error {}
        var configuration = DownloadFixture.configuration(retries: 0)
        configuration.checkpointing = DownloadTask.Checkpointing(interval: .zero) { _ in throw Refused() }
        let task = try fixture.download(configuration: configuration)
        gate.open()
        let error = try #require(await failure(of: task))
        #expect(error.message.contains("cannot write the resume token"), "\(error)")
        #expect(!fixture.directory.contents().contains("file.bin"))
    }
}

/// Tokens handed to a checkpoint handler, in order.
final class TokenLog: Sendable {
    private let storage = Mutex<[ResumeToken]>([])
    func append(_ token: ResumeToken) { storage.withLock { $0.append(token) } }
    var tokens: [ResumeToken] { storage.withLock { $0 } }
}
