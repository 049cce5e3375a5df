import Dispatch
import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Adversarial review of the queue's life cycle around the fix of 47bc2ab (a released queue no longer writes a pause
/// back over a download that finished): the other calls that write a record, and what a restore finds afterwards.
@Suite("Queue life-cycle attack: records written around a download's end", .serialized)
struct QueueLifecycleAttackTests {
    static func configuration() -> DownloadTask.Configuration {
        var configuration = DownloadFixture.configuration(retries: 2, transport: .libcurl)
        configuration.connections = .single
        return configuration
    }

    enum Change: String, CaseIterable, Sendable {
        case setPriority, moveToFront
    }

    /// Rule broken: a finished file is never downloaded twice when it was safely on disk (rule 1); a released queue
    /// leaves no record of a download whose file is in place.
    ///
    /// The fix of 47bc2ab made `deinit`'s write conditional (`onlyIfPresent`), but `setPriority(_:_:)` and
    /// `moveToFront(_:)` write the record through `persist(_:state:running:)`, which saves unconditionally. Sequence:
    /// a download finishes, its file is moved into place and its record leaves the store (the hook holds the
    /// download's thread right there, before the result reaches the queue); the user changes its priority (to the
    /// queue it is still running), which writes a new record, `queued`, without a token (the store forgot the one
    /// it had); the queue is released, so `ended(_:result:)`, which would have removed the record again, never runs.
    /// Observed: the record stays in `tasks/`; the next `restore()` downloads the file again from byte 0 into
    /// `done (1).bin`.
    @Test(
        "A priority change that reaches a finished download just before the queue is released leaves no record",
        arguments: Change.allCases)
    func priorityChangeWhileFinishingThenRelease(change: Change) async throws {
        let fixture = try DownloadFixture(transport: .libcurl)
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 200_000, seed: 41)
        let url = fixture.serve(.bytes(bytes), at: "/done.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let state = fixture.directory.url.appendingPathComponent("state")

        let removed = Atomic<Bool>(false)
        let proceed = DispatchSemaphore(value: 0)
        var hooks = DownloadQueue.Hooks()
        hooks.afterFinishedRecordRemoved = { _ in
            removed.store(true, ordering: .sequentiallyConsistent)
            _ = proceed.wait(timeout: .now() + 120)
        }
        var store: TaskStore? = try TaskStore(directory: state)
        var queue: DownloadQueue? = DownloadQueue(
            configuration: .init(download: Self.configuration()), store: store, hooks: hooks)
        weak let released = queue
        let id = try await queue!.add(url, destination: .directory(output))
        let recordFile = state.appendingPathComponent("tasks/\(id).json").path

        let reachedEnd = try await waitUntil { removed.load(ordering: .sequentiallyConsistent) }
        if !reachedEnd { proceed.signal() }
        try #require(reachedEnd)
        #expect(!FileManager.default.fileExists(atPath: recordFile))
        switch change {
        case .setPriority: await queue!.setPriority(id, 5)
        case .moveToFront: await queue!.moveToFront(id)
        }
        #expect(
            !FileManager.default.fileExists(atPath: recordFile),
            "\(change.rawValue) wrote a record for a download whose file is already in place")
        queue = nil
        let gone = try await waitUntil { released == nil }
        proceed.signal()
        try #require(gone, "the queue was not released")
        try expectSameBytes(fixture.contents(of: output.appendingPathComponent("done.bin")), bytes)
        #expect(
            !FileManager.default.fileExists(atPath: recordFile),
            "the released queue left a record behind for a download whose file is in place")

        store = nil
        let reopened = try #require(
            await reopenedStore(at: state), "the store is still held after its queue was released")
        let next = DownloadQueue(configuration: .init(download: Self.configuration()), store: reopened)
        #expect(await next.restore().isEmpty)
        await next.resumeAll()
        _ = await next.waitUntilIdle()
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: output.path).sorted() == ["done.bin"],
            "the finished file was downloaded a second time")
        #expect(fixture.server.requests(for: "/done.bin").count == 1, "the file was requested again")
    }

    /// Rule broken: a finished file is never downloaded twice when it was safely on disk (rule 1), in the crash the
    /// store documents as handled (`docs/task-store.md`, Durability: "If the process dies between the two [the file
    /// in place, the record removed], the restored record's token finds its temporary file moved into place: the
    /// download is reported as `finishedEarlier` and its record removed, nothing is downloaded again").
    ///
    /// Sequence: `out/done.bin` already exists (another file, 11 bytes). A queue downloads `done.bin` into `out/`;
    /// with the default `chooseFreeName` the finished file goes to `out/done (1).bin`. The process dies after the
    /// move, before the record's (unflushed) removal reached the disk: the test keeps the record file as it is on
    /// disk at that instant (a hook runs just before the removal) and writes it back afterwards. A new queue restores
    /// it. Before the fix, `Reconciliation.movedIntoPlace` looked only at the token's own name, `out/done.bin`, found
    /// a file of another length there, and called the temporary file missing; the queue passes a destination, so the
    /// download started over: the file was requested again and saved a second time, as `out/done (2).bin`. Had the
    /// other file had the same length, the restore would have reported it as this download, finished.
    @Test("A crash between the move into a free name and the record's removal: restore does not download it again")
    func crashAfterMoveIntoFreeName() async throws {
        let fixture = try DownloadFixture(transport: .libcurl)
        defer { fixture.server.shutdown() }
        let length: Int64 = 2 << 20
        let bytes = testBytes(count: Int(length), seed: 42)
        let url = fixture.serve(.bytes(bytes), at: "/done.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let theirs = Data("not theirs\n".utf8)
        try theirs.write(to: output.appendingPathComponent("done.bin"))
        let state = fixture.directory.url.appendingPathComponent("state")

        // The record on disk when the file is in place and the record not yet removed: what a crash there leaves.
        let atCrash = Mutex<Data?>(nil)
        var hooks = DownloadQueue.Hooks()
        hooks.beforeFinishedRecordRemoved = { id in
            let file = state.appendingPathComponent("tasks/\(id).json").path
            atCrash.withLock { $0 = FileManager.default.contents(atPath: file) }
        }
        var store: TaskStore? = try TaskStore(directory: state)
        var queue: DownloadQueue? = DownloadQueue(
            configuration: .init(download: Self.configuration()), store: store, hooks: hooks)
        let id = try await queue!.add(url, destination: .directory(output))
        let recordFile = state.appendingPathComponent("tasks/\(id).json").path
        let summary = await queue!.waitUntilIdle()
        #expect(summary.finished == 1)
        let saved = output.appendingPathComponent("done (1).bin")
        try expectSameBytes(fixture.contents(of: saved), bytes)
        try expectSameBytes(Data(contentsOf: output.appendingPathComponent("done.bin")), theirs)
        #expect(!FileManager.default.fileExists(atPath: recordFile))
        let finalRecord = try #require(atCrash.withLock { $0 }, "the record was not on disk at the crash point")
        let object = try #require(try JSONSerialization.jsonObject(with: finalRecord) as? [String: Any])
        let token = try #require(object["token"] as? [String: Any])
        #expect((token["offset"] as? NSNumber)?.int64Value == length)
        #expect(token["finalName"] as? String == "done (1).bin")
        queue = nil
        store = nil
        let requestsBefore = fixture.server.requests(for: "/done.bin").count

        // kill -9 after the move, before the removal of the record reached the disk.
        try finalRecord.write(to: URL(fileURLWithPath: recordFile))
        let reopened = try #require(
            await reopenedStore(at: state), "the store is still held after its queue was released")
        let next = DownloadQueue(configuration: .init(download: Self.configuration()), store: reopened)
        #expect(await next.restore().isEmpty)
        let summaryAfter = await next.waitUntilIdle()
        #expect(await next.items.isEmpty)
        #expect(summaryAfter.finished == 1, "the restored download was not reported finished: \(summaryAfter)")
        #expect(
            fixture.server.requests(for: "/done.bin").count == requestsBefore,
            "the restored record downloaded the finished file again")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: output.path).sorted() == ["done (1).bin", "done.bin"],
            "a second copy of the finished file was saved")
        try expectSameBytes(fixture.contents(of: saved), bytes)
        #expect(!FileManager.default.fileExists(atPath: recordFile))
    }
}
