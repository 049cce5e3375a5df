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
        let directory = try TemporaryDirectory()
        let state = directory.url.appendingPathComponent("state")
        let store = try TaskStore(directory: state)
        let id = DownloadQueue.TaskID()
        let first = (store.partialPath as NSString).appendingPathComponent(".resumable-first.partial")
        let base = TaskRecord(
            id: id, url: try #require(URL(string: "http://127.0.0.1:9/f.bin")), destination: .directory(directory.url),
            priority: 0, order: 0, state: .queued)
        try store.save(base, running: true)
        try store.checkpoint(id, token: .sample(tempPath: first, offset: 100_000))

        // Every record write fails: the first run gives its file up, and the record cannot forget the token.
        let planted = state.appendingPathComponent("tasks/\(id).json.writing")
        try FileManager.default.createDirectory(at: planted, withIntermediateDirectories: false)
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
}
