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
        #expect(try fixture.contents(of: output.appendingPathComponent("done.bin")) == bytes)

        // What the record would cost: the next restore downloads the file again, into a second file.
        store = nil
        var reopened: TaskStore?
        _ = try await waitUntil(timeout: .seconds(30)) {
            reopened = try? TaskStore(directory: state)
            return reopened != nil
        }
        try #require(reopened != nil, "the store is still held 30 s after its queue was released")
        let next = DownloadQueue(configuration: .init(download: configuration), store: reopened)
        #expect(await next.restore().isEmpty)
        await next.resumeAll()
        _ = await next.waitUntilIdle()
        #expect(await next.items.isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == ["done.bin"])
    }
}
