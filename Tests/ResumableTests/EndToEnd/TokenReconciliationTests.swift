import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// What a resume does with the temporary file a token names.
@Suite("Reconciling a token with its temporary file")
struct TokenReconciliationTests {
    @Test(
        "A temporary file shorter than the token says resumes from what is really there", arguments: TransportKind.all)
    func lostTail(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 10_000)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 6000)
        try FileHandle(forWritingTo: URL(fileURLWithPath: token.tempPath)).truncate(atOffset: 2500)
        fixture.server.clearRequests()
        let task = try fixture.resumeThroughDisk(token)
        let events = task.events
        let result = try await task.value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges() == ["bytes=2500-"])
        #expect(result.resumedAtOffset == 2500)
        _ = events
    }

    @Test("Bytes beyond the token's offset are cut off, not trusted", arguments: TransportKind.all)
    func untrustedTail(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 10_000)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 3000)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: token.tempPath))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(repeating: 0xEE, count: 4000))
        try handle.close()
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges() == ["bytes=3000-"])
    }

    @Test(
        "A missing temporary file restarts cleanly into the destination the caller chooses, and says so",
        arguments: TransportKind.all)
    func missingTemporaryFile(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 10_000)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 3000)
        try FileManager.default.removeItem(atPath: token.tempPath)
        fixture.server.clearRequests()
        let chosen = fixture.directory.url.appendingPathComponent("chosen.bin")
        let task = try DownloadTask.resume(
            from: token, destination: .file(chosen), configuration: DownloadFixture.configuration(transport: transport))
        var reconciled = false
        for await event in task.events {
            if case .reconciled(let tokenOffset, let bytesOnDisk) = event {
                reconciled = tokenOffset == token.offset && bytesOnDisk == 0
            }
        }
        let result = try await task.value
        #expect(reconciled)
        #expect(result.fileURL.path == chosen.path)
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges() == [nil])
    }

    @Test(
        "Without its temporary file a token's destination is not honored: the caller must choose, nothing is touched",
        arguments: TransportKind.all)
    func missingTemporaryFileNeedsDestination(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 10_000)))
        let token = try await fixture.interruptedToken(after: 3000)
        try FileManager.default.removeItem(atPath: token.tempPath)
        fixture.server.clearRequests()
        let before = try FileManager.default.contentsOfDirectory(atPath: fixture.directory.url.path)
        let error = #expect(throws: ResumableError.self) {
            try DownloadTask.resume(from: token, configuration: DownloadFixture.configuration(transport: transport))
        }
        #expect(error?.code == .destinationRequired)
        #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.directory.url.path) == before)
        #expect(fixture.server.requests.isEmpty)
    }

    @Test(
        "A second resume of a token in use fails at once, and the first continues undisturbed",
        arguments: TransportKind.all)
    func tokenInUse(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 1_000_000)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 100_000)
        // The first resume is held mid-transfer, so it surely holds the temporary file when the second comes.
        let gate = fixture.serveHeld(.bytes(content), after: 50_000)
        let first = try DownloadTask.resume(
            from: token, configuration: DownloadFixture.configuration(transport: transport))
        try await fixture.waitUntilHeld(at: gate, withOnDisk: 150_000)
        let error = #expect(throws: ResumableError.self) {
            try DownloadTask.resume(from: token, configuration: DownloadFixture.configuration(transport: transport))
        }
        #expect(error?.code == .tokenInUse)
        gate.open()
        let result = try await first.value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
    }

    @Test(
        "A token whose temporary file is not beside its destination is refused before anything is touched",
        arguments: TransportKind.all)
    func misplacedTemporaryFile(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 5000)))
        let token = try await fixture.interruptedToken(after: 1000)
        let elsewhere = try TemporaryDirectory()
        let moved = elsewhere.url.appendingPathComponent(URL(fileURLWithPath: token.tempPath).lastPathComponent)
        try FileManager.default.copyItem(atPath: token.tempPath, toPath: moved.path)
        var object = try #require(JSONSerialization.jsonObject(with: token.jsonData()) as? [String: Any])
        object["tempPath"] = moved.path
        let crafted = try ResumeToken(jsonData: JSONSerialization.data(withJSONObject: object))
        let error = #expect(throws: ResumableError.self) {
            try DownloadTask.resume(from: crafted, configuration: DownloadFixture.configuration(transport: transport))
        }
        #expect(error?.code == .invalidToken)
        #expect(try Data(contentsOf: moved).count == 1000, "the file named by the token is untouched")
    }

    /// Paths are bytes on Linux: `Café` spelled with U+00E9 and `Café` spelled `e` + U+0301 are two directories,
    /// although Swift's `String ==` holds them equal (canonical equivalence). A token whose temporary file lies in the
    /// other spelling is not beside the chosen destination.
    @Test(
        "A temporary file in a directory whose name is only canonically equivalent to the destination's is refused",
        arguments: TransportKind.all)
    func canonicallyEquivalentDirectoryRefused(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 5000)))
        let token = try await fixture.interruptedToken(after: 1000)
        let parent = try TemporaryDirectory()
        let composed = parent.url.appendingPathComponent("Caf\u{E9}", isDirectory: true)
        let decomposed = parent.url.appendingPathComponent("Cafe\u{301}", isDirectory: true)
        try FileManager.default.createDirectory(at: composed, withIntermediateDirectories: false)
        try FileManager.default.createDirectory(at: decomposed, withIntermediateDirectories: false)
        try #require(
            try FileManager.default.contentsOfDirectory(atPath: parent.url.path).count == 2,
            "two directories, byte-distinct")
        let moved = decomposed.appendingPathComponent(URL(fileURLWithPath: token.tempPath).lastPathComponent)
        try FileManager.default.copyItem(atPath: token.tempPath, toPath: moved.path)
        var object = try #require(JSONSerialization.jsonObject(with: token.jsonData()) as? [String: Any])
        object["tempPath"] = moved.path
        object["destination"] = composed.path + "/"
        let crafted = try ResumeToken(jsonData: JSONSerialization.data(withJSONObject: object))
        let error = #expect(throws: ResumableError.self) {
            try DownloadTask.resume(
                from: crafted, destination: .directory(composed),
                configuration: DownloadFixture.configuration(transport: transport))
        }
        #expect(error?.code == .invalidToken)
        #expect(try Data(contentsOf: moved).count == 1000, "the file named by the token is untouched")
    }

    @Test("A token whose temporary file is a symbolic link is refused", arguments: TransportKind.all)
    func symlinkRefused(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 5000)))
        let token = try await fixture.interruptedToken(after: 1000)
        let victim = fixture.directory.url.appendingPathComponent("victim.txt")
        try Data("precious".utf8).write(to: victim)
        try FileManager.default.removeItem(atPath: token.tempPath)
        try FileManager.default.createSymbolicLink(atPath: token.tempPath, withDestinationPath: victim.path)
        let error = #expect(throws: ResumableError.self) {
            try DownloadTask.resume(from: token, configuration: DownloadFixture.configuration(transport: transport))
        }
        #expect(error?.code == .invalidToken)
        try expectSameBytes(Data(contentsOf: victim), Data("precious".utf8))
    }

    @Test(
        "Cancelling deletes the temporary file; pausing before any byte returns no token", arguments: TransportKind.all)
    func cancelAndEmptyPause(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let gate = fixture.serveHeld(.bytes(testBytes(count: 2_000_000)), after: 100_000)
        let task = try fixture.download()
        try await fixture.waitUntilHeld(at: gate, withOnDisk: 100_000)
        task.cancel()
        let error = try #require(await failure(of: task))
        #expect(error.code == .cancelled)
        #expect(fixture.directory.contents().isEmpty)

        fixture.serve(.bytes(testBytes(count: 100), behavior: Behavior(status: 503)))
        let idle = try fixture.download(configuration: DownloadFixture.configuration(retries: 100))
        // Paused between retries of a 503: whenever that is, not a byte was kept.
        #expect(await fixture.server.waitForRequests(count: 2, path: "/file.bin", timeout: Waiting.deadline))
        #expect(await idle.cancelProducingResumeData() == nil)
        #expect(fixture.directory.contents().isEmpty)
    }
}

@Suite("Crafted tokens")
struct CraftedTokenTests {
    @Test("A token whose temporary file is a hard link to another file is refused, and that file is untouched")
    func hardLinkRefused() async throws {
        let fixture = try DownloadFixture()
        fixture.serve(.bytes(testBytes(count: 5000)))
        let token = try await fixture.interruptedToken(after: 1000)
        let victim = fixture.directory.url.appendingPathComponent("victim.txt")
        try Data(repeating: 0x41, count: 4000).write(to: victim)
        try FileManager.default.removeItem(atPath: token.tempPath)
        try FileManager.default.linkItem(atPath: victim.path, toPath: token.tempPath)
        let error = #expect(throws: ResumableError.self) { try DownloadTask.resume(from: token) }
        #expect(error?.code == .invalidToken)
        try expectSameBytes(Data(contentsOf: victim), Data(repeating: 0x41, count: 4000), "not truncated, not written")
    }
}
