import Foundation
import LoopbackServer
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A flush that fails, as a failing disk makes `fdatasync` fail (`EIO`): nothing on this machine provokes one, so the
/// file layer's debug seam (``DurableSteps/failing(_:under:errno:)``) fails the flushes under one test's directory.
@Suite("A flush that fails")
struct FailingFlushTests {
    /// A resume into another directory copies the bytes beside the new destination. Without a checkpoint handler, no
    /// token names that copy until the task hands one out; when the last flush fails, it hands out none. The file the
    /// bytes were copied from is then all the caller's token has: it stays, and the copy no token names goes.
    @Test(
        "A resume into another directory whose last flush fails hands out no token and keeps the file the caller's token names",
        arguments: TransportKind.all)
    func failedFlushAfterRelocationKeepsTheOriginal(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let bytes = testBytes(count: 300_000, seed: 71)
        fixture.serve(.bytes(bytes))
        let first = BodyGate(holdingAfter: 100_000)
        fixture.server.enqueue(behavior: Behavior(gate: first), for: "/file.bin")
        let task = try fixture.download()
        try await fixture.waitUntilHeld(at: first, withOnDisk: 100_000)
        let token = try #require(await task.cancelProducingResumeData())
        first.open()
        #expect(token.offset == 100_000)
        let original = try Data(contentsOf: URL(fileURLWithPath: token.tempPath))

        let other = fixture.directory.url.appendingPathComponent("other")
        try FileManager.default.createDirectory(at: other, withIntermediateDirectories: true)
        let second = BodyGate(holdingAfter: 50_000)
        fixture.server.enqueue(behavior: Behavior(gate: second), for: "/file.bin")
        let resumed = try DownloadTask.resume(
            from: token, destination: .directory(other),
            configuration: fixture.applying(nil, to: DownloadFixture.configuration()))
        try #require(await second.waitUntilHeld(timeout: Waiting.deadline))
        // The copy holds the old bytes and the 50,000 the resume wrote since.
        try #require(
            try await waitUntilTemporaryFiles(in: other.path, count: 1, eachHolding: 150_000), "the copy never grew")

        DurableSteps.failing(.flush, under: other.path, errno: EIO)
        defer { DurableSteps.failing(.flush, under: other.path, errno: nil) }
        #expect(await resumed.cancelProducingResumeData() == nil, "a failed flush hands out no token")
        second.open()
        guard case .failure = await resumed.result else {
            Issue.record("the paused task succeeded")
            return
        }
        #expect(
            (try? Data(contentsOf: URL(fileURLWithPath: token.tempPath))) == original,
            "the file the caller's token names is gone or changed")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: other.path).isEmpty,
            "a copy no token names is left")

        DurableSteps.failing(.flush, under: other.path, errno: nil)
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), bytes)
        #expect(fixture.ranges().last == "bytes=100000-")
    }

    /// A queue's download paused while its record holds a checkpoint; the pause's last flush fails, so the task hands
    /// out no token. The record's token still describes bytes on disk (they were flushed before it was written): the
    /// download stays paused with them, and resuming continues from them instead of starting again.
    @Test("A queue's download whose pause cannot flush keeps the checkpoint its record holds, and resumes from it")
    func failedFlushAtPauseKeepsTheRecordedCheckpoint() async throws {
        let fixture = try DownloadFixture(transport: .libcurl, keepAlive: true)
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 1 << 20, seed: 72)
        let gate = fixture.serveHeld(.bytes(bytes), after: 100_000, at: "/held.bin")
        defer { gate.open() }
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let state = fixture.directory.url.appendingPathComponent("state")
        var configuration = DownloadFixture.configuration(retries: 2, transport: .libcurl)
        configuration.connections = .single
        let queue = DownloadQueue(
            configuration: .init(maximumConcurrentDownloads: 1, download: configuration),
            store: try TaskStore(directory: state))
        let id = try await queue.add(fixture.server.url(for: "/held.bin"), destination: .directory(output))
        let partial = state.appendingPathComponent("partial").path
        try #require(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
        try #require(try await waitUntilTemporaryFiles(in: partial, count: 1, eachHolding: 100_000))
        let recordFile = state.appendingPathComponent("tasks/\(id).json").path
        let recorded = try #require(
            try await trickleUntilRecorded(gate, recordFile: recordFile, atLeast: 100_000),
            "the record never got a token: \(gate)")

        DurableSteps.failing(.flush, under: partial, errno: EIO)
        defer { DurableSteps.failing(.flush, under: partial, errno: nil) }
        let events = await queue.events()
        await queue.pause(id)
        var ended: DownloadQueue.Event?
        for await event in events {
            switch event {
            case .paused(id), .failed(id, _), .cancelled(id): ended = event
            default: continue
            }
            break
        }
        if case .paused = ended {
        } else {
            Issue.record("the download did not pause: \(String(describing: ended))")
        }
        DurableSteps.failing(.flush, under: partial, errno: nil)
        #expect(
            recordTokenOffset(recordFile) ?? 0 >= recorded,
            "the record lost the checkpoint its bytes are described by")

        fixture.server.clearRequests()
        gate.open()
        await queue.resume(id)
        _ = await queue.waitUntilIdle()
        expectSameBytes((try? fixture.contents(of: output.appendingPathComponent("held.bin"))), bytes)
        let first = fixture.server.requests(for: "/held.bin").first?.range
        #expect(first == "bytes=\(recorded)-", "resumed with \(String(describing: first)), not from the checkpoint")
    }
}
