import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// The API as structured concurrency sees it: cancelling the awaiting task, pause versus cancel, the deadline, what
/// a result reports, the expected digest, and a checkpoint file that is never stale.
@Suite("Task lifecycle")
struct TaskLifecycleTests {
    static let length: Int64 = 2_000_000
    static let held: Int64 = 300_000

    @Test("Cancelling the task awaiting the value pauses the download with a token", arguments: TransportKind.all)
    func awaitingTaskCancelled(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: Int(Self.length))
        let gate = fixture.serveHeld(.bytes(content), after: Self.held)
        let task = try fixture.download()
        let waiter = Task { try await task.value }
        try await fixture.waitUntilHeld(at: gate, withOnDisk: Self.held)
        waiter.cancel()
        let error = try #require(await waiterFailure(waiter))
        #expect(error.code == .paused, "\(error)")
        let token = try #require(error.resumeToken, "a pause on cancellation carries the token")
        #expect(token.offset == Self.held)
        // Every other awaiter sees the same pause.
        #expect(await failure(of: task)?.code == .paused)

        gate.open()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(result.resumedAtOffset == Self.held)
        #expect(!result.restarted)
        #expect(result.bytesTransferred == Self.length - Self.held)
    }

    @Test("A pause ends the value with paused and the token; a cancel with cancelled and none")
    func pauseVersusCancel() async throws {
        let fixture = try DownloadFixture()
        let gate = fixture.serveHeld(.bytes(testBytes(count: Int(Self.length))), after: Self.held)
        let paused = try fixture.download()
        try await fixture.waitUntilHeld(at: gate, withOnDisk: Self.held)
        let token = try #require(await paused.cancelProducingResumeData())
        let pause = try #require(await failure(of: paused))
        #expect(pause.code == .paused)
        #expect(pause.resumeToken == token)
        #expect(pause.localizedDescription.contains("paused"), "\(pause.localizedDescription)")
        try FileManager.default.removeItem(atPath: token.tempPath)

        let cancelled = try fixture.download()
        try await fixture.waitUntilHeld(at: gate, withOnDisk: Self.held)
        cancelled.cancel()
        let cancel = try #require(await failure(of: cancelled))
        #expect(cancel.code == .cancelled)
        #expect(cancel.resumeToken == nil)
        #expect(fixture.temporaryFiles().isEmpty)
    }

    @Test("A passed deadline stops the download with a token, unretried", arguments: TransportKind.all)
    func deadline(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: Int(Self.length))
        let gate = fixture.serveHeld(.bytes(content), after: Self.held)
        // The held bytes are on disk before the deadline's clock starts, so what the deadline's token must cover
        // does not depend on how fast a busy machine gets them there (a deadline from the first request did not).
        let first = try fixture.download()
        try await fixture.waitUntilHeld(at: gate, withOnDisk: Self.held)
        let paused = try #require(await first.cancelProducingResumeData())
        #expect(paused.offset == Self.held)
        // Now every response stops right after its head, and the gate stays closed while the deadline runs: only
        // the deadline can end the resumed download, and it can add no byte to the file.
        let closed = fixture.serveHeld(.bytes(content), after: 0)

        var configuration = DownloadFixture.configuration()
        configuration.deadline = .milliseconds(300)
        let retries = Counter()
        configuration.eventHandler = { event in
            if case .retrying = event { retries.increment() }
        }
        let task = try fixture.resumeThroughDisk(paused, configuration: configuration)
        let error = try #require(await failure(of: task))
        #expect(error.code == .timedOut, "\(error)")
        #expect(error.message.contains("deadline"))
        #expect(retries.value == 0)
        // Whether the deadline passed before or after the resumed request reached the server, nothing already on
        // disk is lost.
        let token = try #require(error.resumeToken)
        #expect(token.offset == Self.held)
        try expectSameBytes(
            fixture.contents(of: URL(fileURLWithPath: token.tempPath)), Array(content.prefix(Int(Self.held))))

        closed.open()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
    }

    @Test("A restart reports offset 0 and restarted; the result carries the final headers and MIME type")
    func resultOfRestart() async throws {
        let fixture = try DownloadFixture()
        let old = testBytes(count: 50_000, seed: 1)
        fixture.serve(.bytes(old))
        let token = try await fixture.interruptedToken(after: 20_000)
        let new = testBytes(count: 60_000, seed: 2)
        fixture.serve(
            .bytes(
                new, contentType: "Application/Zip; charset=binary",
                extraHeaders: [HeaderField("X-Note", "a"), HeaderField("X-Note", "b")]))
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), new)
        #expect(result.restarted)
        #expect(result.resumedAtOffset == 0)
        #expect(result.status == 200)
        #expect(result.mimeType == "application/zip")
        #expect(result.responseHeader("x-note") == "a, b")
        #expect(result.responseHeader("Content-Length") == "60000")
        #expect(result.responseHeaders["etag"] == result.etag)
    }

    @Test("A malformed expected SHA-256 fails when the task is created, before any request")
    func malformedDigest() throws {
        let fixture = try DownloadFixture()
        fixture.serve(.bytes(testBytes(count: 1000)))
        for digest in ["abc", String(repeating: "g", count: 64), String(repeating: "0", count: 65), ""] {
            var configuration = DownloadFixture.configuration()
            configuration.expectedSHA256 = digest
            #expect(throws: ResumableError.self) { try fixture.download(configuration: configuration) }
            do {
                _ = try fixture.download(configuration: configuration)
            } catch let error as ResumableError {
                #expect(error.code == .invalidRequest)
            } catch {
                Issue.record("untyped error \(error)")
            }
        }
        #expect(fixture.server.requests(for: "/file.bin").isEmpty)
        #expect(fixture.temporaryFiles().isEmpty)
    }

    @Test("The expected SHA-256 travels in the token: a resume verifies it without being told again")
    func digestInToken() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: Int(Self.length))
        var digest = PortableSHA256()
        digest.update(content)
        let expected = digest.hexDigest()
        let gate = fixture.serveHeld(.bytes(content), after: Self.held)
        var configuration = DownloadFixture.configuration()
        configuration.expectedSHA256 = expected.uppercased()
        let task = try fixture.download(configuration: configuration)
        try await fixture.waitUntilHeld(at: gate, withOnDisk: Self.held)
        let token = try #require(await task.cancelProducingResumeData())
        #expect(token.expectedSHA256 == expected)
        let decoded = try ResumeToken(jsonData: token.jsonData())
        #expect(decoded.expectedSHA256 == expected)

        // Asking for another digest than the token's is refused.
        var conflicting = DownloadFixture.configuration()
        conflicting.expectedSHA256 = String(repeating: "0", count: 64)
        #expect(throws: ResumableError.self) { try DownloadTask.resume(from: token, configuration: conflicting) }

        // The server now serves other bytes under the same validators: only the digest can tell.
        var tampered = content
        tampered[Int(Self.length) - 1] ^= 0xFF
        let resource = Resource.bytes(content)
        fixture.serve(.bytes(tampered, etag: resource.etag, lastModified: resource.lastModified))
        gate.open()
        let error = try #require(await failure(of: try fixture.resumeThroughDisk(token)))
        #expect(error.code == .checksumMismatch)
        #expect(error.resumeToken == nil)
        #expect(fixture.directory.contents().isEmpty)
    }

    @Test("A checkpoint file holds the pause's token, and is removed when nothing is left to resume")
    func checkpointFileNeverStale() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: Int(Self.length))
        let gate = fixture.serveHeld(.bytes(content), after: Self.held)
        let scratch = try TemporaryDirectory()
        let tokenFile = scratch.url.appendingPathComponent("download.token")
        var configuration = DownloadFixture.configuration()
        configuration.checkpointing = .file(tokenFile, interval: .seconds(3600))

        // Paused: the file holds exactly the pause's token.
        let paused = try fixture.download(configuration: configuration)
        try await fixture.waitUntilHeld(at: gate, withOnDisk: Self.held)
        let token = try #require(await paused.cancelProducingResumeData())
        #expect(try ResumeToken(contentsOf: tokenFile) == token)

        // Failed for good (a checksum mismatch deletes the file): the token file goes too.
        var wrongDigest = configuration
        wrongDigest.expectedSHA256 = String(repeating: "0", count: 64)
        gate.open()
        let mismatch = try DownloadTask.resume(from: token, configuration: wrongDigest)
        #expect(await failure(of: mismatch)?.code == .checksumMismatch)
        #expect(!FileManager.default.fileExists(atPath: tokenFile.path))

        // Cancelled: the temporary file is deleted and so is the token file.
        let gate2 = fixture.serveHeld(.bytes(content), after: Self.held, at: "/other.bin")
        let cancelled = try fixture.download("/other.bin", configuration: configuration)
        try await fixture.waitUntilHeld(at: gate2, withOnDisk: Self.held)
        _ = try await waitUntil { FileManager.default.fileExists(atPath: tokenFile.path) }
        cancelled.cancel()
        #expect(await failure(of: cancelled)?.code == .cancelled)
        #expect(!FileManager.default.fileExists(atPath: tokenFile.path))
    }

    @Test(
        "A CDN that answers 200 to an ETag If-Range of an unchanged file costs only the missing bytes",
        arguments: TransportKind.all)
    func entityTagIfRangeIgnored(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 4 << 20)
        let held: Int64 = 1 << 20
        let gate = fixture.serveHeld(.bytes(content, lastModified: nil), after: held)
        let task = try fixture.download()
        try await fixture.waitUntilHeld(at: gate, withOnDisk: held)
        let token = try #require(await task.cancelProducingResumeData())
        gate.open()

        fixture.serve(.bytes(content, lastModified: nil, behavior: Behavior(ifRangeHonorsDatesOnly: true)))
        let resumed = try fixture.resumeThroughDisk(token)
        let restarts = Counter()
        let events = Task {
            for await case .restarted in resumed.events { restarts.increment() }
        }
        let result = try await resumed.value
        await events.value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(result.bytesTransferred == Int64(content.count) - held)
        #expect(result.resumedAtOffset == held)
        #expect(!result.restarted)
        #expect(restarts.value == 0)
        let resumes = fixture.server.requests(for: "/file.bin").dropFirst()
        #expect(resumes.map { $0.header("Range") } == ["bytes=\(held)-", "bytes=\(held)-"])
        #expect(resumes.map { $0.header("If-Range") } == [token.etag, nil])
    }
}

/// The error a waiting task ended with.
private func waiterFailure(_ waiter: Task<DownloadResult, any Error>) async -> ResumableError? {
    switch await waiter.result {
    case .success(let result):
        Issue.record("expected the awaiting task to fail, it finished: \(result)")
        return nil
    case .failure(let error):
        #expect(error is ResumableError, "\(error)")
        return error as? ResumableError
    }
}

/// A thread-safe counter for event handlers.
private final class Counter: Sendable {
    private let count = Mutex(0)
    var value: Int { count.withLock { $0 } }
    func increment() { count.withLock { $0 += 1 } }
}
