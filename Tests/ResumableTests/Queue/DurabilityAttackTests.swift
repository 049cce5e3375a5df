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

/// Adversarial review of the day's durability fixes through a `DownloadQueue` and its `TaskStore`: 09788c4 (a
/// download that ends without a token keeps the token its record holds), 0103453 (a flush that failed once fails
/// every later flush of that file).
@Suite("Durability fixes under attack: the queue")
struct DurabilityAttackTests {
    /// Rule broken: `docs/task-store.md`: a record's token "describes bytes that are really in the temporary file";
    /// `keepsFailuresForGood`: a failure with nothing to resume is for good (the CLI's batch reports it and removes
    /// it), never one that "waits for a resume like a paused one ... from its bytes".
    ///
    /// Sequence: a queue's download (with `keepsFailuresForGood`, as the CLI's batches) is cut after 100,000 bytes
    /// without retries: it fails with a token, and its record names its temporary file `B`. `B` is then lost (as a
    /// crash loses a file whose directory entry `partial/` never flushed, or a cleaner removes it), and the server's
    /// file is gone (404). `resume(id)`: the task finds `B` missing, starts over in a new file `C` (the queue always
    /// passes a destination), gets 404, ends with nothing on disk: `C` is removed and the error carries no token.
    ///
    /// Observed: since 09788c4 `DownloadQueue.ended` takes a failure without a token for "its last flush failed" and
    /// attaches the record's token, which names `B`, a file that no longer exists: the 404 is reported resumable
    /// (with a token), the download is not a failure for good, and the record keeps the token to nothing. Every
    /// `resumable resume --state` downloads it again from byte 0, fails again and keeps it: the batch never ends.
    @Test("A failure with nothing on disk after the record's temporary file was lost is for good, without a token")
    func failureAfterLostTemporaryFileKeepsNoToken() async throws {
        let fixture = try DownloadFixture(transport: .libcurl)
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 300_000, seed: 8001)
        let path = "/lost.bin"
        let url = fixture.serve(.bytes(bytes), at: path)
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 100_000), for: path)
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let state = fixture.directory.url.appendingPathComponent("state")
        var download = DownloadFixture.configuration(retries: 0, transport: .libcurl)
        download.connections = .single
        // A checkpoint is due when bytes arrive a whole interval after the last one: once the records cannot be
        // written, the first run's rest must arrive within it, or its checkpoint fails the download before the checksum
        // does. 5 s, so that only a test held from running that long between the record's checkpoint and opening the
        // gate meets one.
        download.checkpointing = DownloadTask.Checkpointing(interval: .seconds(5)) { _ in }
        var configuration = DownloadQueue.Configuration(maximumConcurrentDownloads: 1, download: download)
        configuration.keepsFailuresForGood = true
        let store = try TaskStore(directory: state)
        let queue = DownloadQueue(configuration: configuration, store: store)
        let id = try await queue.add(url, destination: .directory(output))
        _ = await queue.waitUntilIdle()
        let first = try #require(store.record(id)?.token, "the cut download left no token")
        try #require(first.offset == 100_000, "\(first)")
        try #require(FileManager.default.fileExists(atPath: first.tempPath))

        // The temporary file is lost, and the server's file is gone.
        try FileManager.default.removeItem(atPath: first.tempPath)
        fixture.server.removeResource(at: path)
        let events = await queue.events()
        await queue.resume(id)
        var failure: ResumableError?
        for await event in events {
            if case .failed(id, let error) = event {
                failure = error
                break
            }
            if case .finished(id, _) = event { break }
        }
        _ = await queue.waitUntilIdle()
        let error = try #require(failure, "the download did not fail")
        #expect(error.httpStatus == 404, "\(error)")
        let partial = (try? FileManager.default.contentsOfDirectory(atPath: store.partialPath)) ?? []
        #expect(partial.isEmpty, "a temporary file is left: \(partial)")
        #expect(
            error.resumeToken == nil,
            "nothing is on disk, yet the 404 carries a token naming \(error.resumeToken?.tempPath ?? "") (exists: \(FileManager.default.fileExists(atPath: error.resumeToken?.tempPath ?? "/nonexistent")))"
        )
        #expect(
            store.record(id)?.token == nil,
            "the record keeps a token of \(store.record(id)?.token?.offset ?? -1) bytes naming a file that does not exist"
        )
        #expect(
            await queue.failuresForGood == [id],
            "a 404 with nothing on disk is not a failure for good: the batch keeps it to resume forever")
        await queue.cancel(id)
    }

    /// The token in the record file at `path`: (temporary file, offset), if it has one.
    static func recordToken(_ path: String) -> (tempPath: String, offset: Int64)? {
        guard let data = FileManager.default.contents(atPath: path),
            let record = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let token = record["token"] as? [String: Any], let tempPath = token["tempPath"] as? String,
            let offset = (token["offset"] as? NSNumber)?.int64Value
        else { return nil }
        return (tempPath, offset)
    }

    /// A task store whose record of one download holds a checkpoint (100,000 bytes) naming `file` in `partial/`.
    struct CheckpointedRecord {
        let directory: TemporaryDirectory
        let store: TaskStore
        let id = DownloadQueue.TaskID()
        let base: TaskRecord
        let file: String
        /// Where a directory makes every write of the record fail (its write sibling).
        let planted: URL

        init(fileName: String) throws {
            directory = try TemporaryDirectory()
            let state = directory.url.appendingPathComponent("state")
            store = try TaskStore(directory: state)
            file = (store.partialPath as NSString).appendingPathComponent(fileName)
            base = TaskRecord(
                id: id, url: try #require(URL(string: "http://127.0.0.1:9/f.bin")),
                destination: .directory(directory.url), priority: 0, order: 0, state: .queued)
            planted = state.appendingPathComponent("tasks/\(id).json.writing")
            try store.save(base, running: true)
            try store.checkpoint(id, token: .sample(tempPath: file, offset: 100_000))
        }

        /// Every write of the record fails from now on, as on a full or failing disk.
        func failRecordWrites() throws {
            try FileManager.default.createDirectory(at: planted, withIntermediateDirectories: false)
        }
    }

    /// Rule broken: rule 2 (nothing downloaded is lost without need), and 09788c4's own promise
    /// (`docs/task-store.md`): a task that hands out no token keeps its record's, unless that token names a file the
    /// download gave up (`keepsAbandonedFile`).
    ///
    /// helper-80's sequence: a download's record cannot forget its token when the download gives its file up (a
    /// checksum mismatch while every record write fails), so the store keeps the file (`keptTemporaryFiles`); the
    /// disk recovers, the download is resumed from byte 0 into a new file, and its record is checkpointed there; a
    /// pause whose flush fails then hands out no token. `keepsAbandonedFile` still answered true for the first run's
    /// file, so the queue dropped the second run's checkpoint and started again from byte 0. Checked on the store
    /// itself, step by step: end to end, the first run's end raced its own periodic checkpoint against the failing
    /// record writes.
    @Test("A file abandoned in an earlier run no longer discards a later run's checkpoint naming another file")
    func staleAbandonedFileDropsTheNewCheckpoint() throws {
        let checkpointed = try CheckpointedRecord(fileName: ".resumable-first.partial")
        let (store, id, base, first, planted) = (
            checkpointed.store, checkpointed.id, checkpointed.base, checkpointed.file, checkpointed.planted
        )
        defer { withExtendedLifetime(checkpointed) {} }
        // Every record write fails: the first run gives its file up, and the record cannot forget the token.
        try checkpointed.failRecordWrites()
        #expect(!store.forgetToken(id, naming: first), "the rewrite was planted to fail")
        #expect(store.keepsAbandonedFile(id))

        // The disk recovers; the second run checkpoints its own file into the record.
        try FileManager.default.removeItem(at: planted)
        let second = (store.partialPath as NSString).appendingPathComponent(".resumable-second.partial")
        try store.save(base, running: true)
        try store.checkpoint(id, token: .sample(tempPath: second, offset: 497_000))
        #expect(store.record(id)?.token?.tempPath == second)
        #expect(
            !store.keepsAbandonedFile(id),
            "the first run's abandoned file still discards the record's checkpoint of the second run's file")
    }

    /// fe5664f promises (`docs/task-store.md`): a download that started over from a lost file and failed with nothing
    /// on disk drops the record's token naming the lost file, "and a failure with nothing on disk stays a failure for
    /// good". `DownloadQueue.ended` attaches `store.record(id)?.token` to a failure without a token unless
    /// `keepsAbandonedFile(id)`.
    ///
    /// Sequence, on the store step by step (as a3400a2 checks fe5664f): the record's token names `lost` (its file is
    /// gone); the download started over in `fresh`, got a 404 with nothing on disk, and the library calls
    /// `forgetToken(id, naming: fresh)`, while the record cannot be rewritten (a directory planted at
    /// `tasks/<id>.json.writing`, as a full or failing disk). `forgetToken` returns true (the file may go), but leaves
    /// the in-memory record with the token naming `lost`, and `keepsAbandonedFile(id)` is false: the queue then
    /// attaches a token naming a file that does not exist, and the 404 is reported resumable instead of for good.
    @Test("A record that cannot forget a token naming another (lost) file does not hand that token to the queue")
    func failedForgetOfAnotherFilesTokenKeepsNoToken() throws {
        let checkpointed = try CheckpointedRecord(fileName: ".resumable-lost.partial")
        let (store, id, lost) = (checkpointed.store, checkpointed.id, checkpointed.file)
        defer { withExtendedLifetime(checkpointed) {} }
        let fresh = (store.partialPath as NSString).appendingPathComponent(".resumable-fresh.partial")
        #expect(!FileManager.default.fileExists(atPath: lost))

        // The record cannot be rewritten when the started-over download gives `fresh` up.
        try checkpointed.failRecordWrites()
        #expect(store.forgetToken(id, naming: fresh), "the record never named the file: it may go")

        // What `DownloadQueue.ended` attaches to the failure: `keepsAbandonedFile(id) ? nil : record(id)?.token`.
        let attached = store.keepsAbandonedFile(id) ? nil : store.record(id)?.token
        #expect(
            attached == nil,
            "the queue attaches a token naming \(attached?.tempPath ?? ""), which does not exist: the 404 is resumable")
    }
}
