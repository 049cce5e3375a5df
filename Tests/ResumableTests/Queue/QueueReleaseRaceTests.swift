import Dispatch
import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// A queue released in the instant between a download's end and the queue hearing of it.
@Suite("Queue release race: a pause on its way while the file is moved into place")
struct QueueReleaseRaceTests {
    /// Rule broken before the fix: nothing downloaded twice that was safely on disk.
    ///
    /// A download finishes: its file is moved into place and its record leaves the store. Before its result reaches
    /// the queue, the user pauses it (the queue still sees it running) and releases the queue. The released queue's
    /// `deinit` wrote the pause into the store, which brought back a record for a download that was done; the next
    /// `restore()` ran it again, from byte 0, into a second file. The hook holds the download's thread right after
    /// the record's removal, so the pause and the release always land in that instant.
    @Test("A pause that reaches a finished download just before the queue is released leaves no record behind")
    func pauseWhileFinishingThenRelease() async throws {
        let fixture = try DownloadFixture(transport: .libcurl)
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 200_000, seed: 7)
        let url = fixture.serve(.bytes(bytes), at: "/done.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let state = fixture.directory.url.appendingPathComponent("state")

        let removed = Atomic<Bool>(false)
        let proceed = DispatchSemaphore(value: 0)
        var hooks = DownloadQueue.Hooks()
        hooks.afterFinishedRecordRemoved = { _ in
            removed.store(true, ordering: .sequentiallyConsistent)
            // Bounded: a test that failed before signalling must not hold a thread for good.
            _ = proceed.wait(timeout: .now() + 120)
        }
        var configuration = DownloadFixture.configuration(transport: .libcurl)
        configuration.connections = .single
        var store: TaskStore? = try TaskStore(directory: state)
        var queue: DownloadQueue? = DownloadQueue(
            configuration: .init(download: configuration), store: store, hooks: hooks)
        weak let released = queue
        let id = try await queue!.add(url, destination: .directory(output))
        let recordFile = state.appendingPathComponent("tasks/\(id).json").path

        try #require(try await waitUntil { removed.load(ordering: .sequentiallyConsistent) })
        #expect(!FileManager.default.fileExists(atPath: recordFile), "the finished download's record is still there")
        // The queue has not heard of the end: to it the download runs, and this pause is on its way to it.
        await queue!.pause(id)
        queue = nil
        let gone = try await waitUntil { released == nil }
        proceed.signal()
        try #require(gone, "the queue was not released")

        #expect(
            !FileManager.default.fileExists(atPath: recordFile),
            "the released queue wrote a record back for a download whose file is in place")
        try expectSameBytes(fixture.contents(of: output.appendingPathComponent("done.bin")), bytes)

        // What the record would cost: the next restore downloads the file again, into a second file.
        store = nil
        let reopened = try #require(
            await reopenedStore(at: state), "the store is still held after its queue was released")
        let next = DownloadQueue(configuration: .init(download: configuration), store: reopened)
        #expect(await next.restore().isEmpty)
        await next.resumeAll()
        _ = await next.waitUntilIdle()
        #expect(await next.items.isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == ["done.bin"])
    }

    /// A cancel's bytes go even when a pause reached the download first.
    ///
    /// The user pauses a running download (it ends, leaving a token and its temporary file), then cancels it before
    /// the queue heard of the pause, then releases the queue. The released queue cancelled the task, which had
    /// already ended and discarded nothing, and removed the record: the temporary file stayed in `partial/`, owned by
    /// nobody, until some later `restore()` of the store cleaned it up. The hook holds the download's result before
    /// it reaches the queue, so the cancel and the release always land in that instant.
    @Test("A pause, then a cancel, then a release before the queue heard of the pause: the bytes go with the record")
    func pauseThenCancelThenRelease() async throws {
        let fixture = try DownloadFixture(transport: .libcurl, keepAlive: true)
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 1 << 20, seed: 8)
        let gate = fixture.serveHeld(.bytes(bytes), after: 100_000, at: "/held.bin")
        defer { gate.open() }
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let state = fixture.directory.url.appendingPathComponent("state")
        let partial = state.appendingPathComponent("partial").path

        let reached = Atomic<Bool>(false)
        let proceed = Atomic<Bool>(false)
        var hooks = DownloadQueue.Hooks()
        hooks.beforeEnded = { _ in
            reached.store(true, ordering: .sequentiallyConsistent)
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(120)
            while !proceed.load(ordering: .sequentiallyConsistent), clock.now < deadline {
                try? await Task.sleep(for: .milliseconds(5))
            }
        }
        var configuration = DownloadFixture.configuration(transport: .libcurl)
        configuration.connections = .single
        let store = try TaskStore(directory: state)
        var queue: DownloadQueue? = DownloadQueue(
            configuration: .init(download: configuration), store: store, hooks: hooks)
        weak let released = queue
        let id = try await queue!.add(fixture.server.url(for: "/held.bin"), destination: .directory(output))
        let recordFile = state.appendingPathComponent("tasks/\(id).json").path
        try #require(await gate.waitUntilHeld(count: 1, timeout: Waiting.deadline), "\(gate)")
        try #require(try await waitUntilTemporaryFiles(in: partial, count: 1, eachHolding: 100_000))

        await queue!.pause(id)
        let paused = try await waitUntil { reached.load(ordering: .sequentiallyConsistent) }
        if !paused { proceed.store(true, ordering: .sequentiallyConsistent) }
        try #require(paused, "the paused download's result never came")
        // The pause left its bytes and a token: the download is over, but the queue has not heard of it.
        #expect(try FileManager.default.contentsOfDirectory(atPath: partial).count == 1)
        await queue!.cancel(id)
        queue = nil
        let gone = try await waitUntil { released == nil }
        proceed.store(true, ordering: .sequentiallyConsistent)
        try #require(gone, "the queue was not released")

        #expect(!FileManager.default.fileExists(atPath: recordFile), "the cancelled download's record is still there")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: partial).isEmpty,
            "the cancelled download's bytes are still in partial/")
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path).isEmpty)
        withExtendedLifetime(store) {}
    }
}
