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
    /// (`docs/task-store.md`): "A task whose last flush fails (a pause, a failure) hands out no token ... The record's
    /// token was written after an earlier flush and still describes bytes on disk: the download keeps it, paused or
    /// failed, and resumes from it".
    ///
    /// Sequence (`keepsFailuresForGood`, as the CLI's batches): a download with a wrong `expectedSHA256` checkpoints
    /// into its record, then its record cannot be rewritten (a directory planted at `tasks/<id>.json.writing` makes
    /// every record write fail, as a full or failing disk would). The body ends, the checksum does not match, and the
    /// record cannot forget its token: the store keeps the temporary file instead (`keptTemporaryFiles`), and the
    /// download stays, failed for good. The disk recovers (the planted directory goes); the download is resumed, from
    /// byte 0, into a new temporary file, and checkpoints again into its record (on disk). It is paused, and that
    /// pause's flush fails (`DurableSteps.failing`).
    ///
    /// Observed: the record loses the checkpoint of the second run, and the paused download starts again from byte 0:
    /// `TaskStore.keepsAbandonedFile(id)` still answers true for the first run's file (`keptTemporaryFiles` is cleared
    /// only by `remove`), so `DownloadQueue.ended` does not take the record's token, takes the pause for "before the
    /// first byte", and `forgetToken(id)` drops the token from the record, whose bytes are left to the next cleanup.
    @Test("A download whose earlier record rewrite failed keeps its new checkpoint when a later pause cannot flush")
    func staleAbandonedFileDropsTheNewCheckpoint() async throws {
        let fixture = try DownloadFixture(transport: .libcurl, keepAlive: true)
        defer { fixture.server.shutdown() }
        let length: Int64 = 4 << 20
        let bytes = testBytes(count: Int(length), seed: 8002)
        let path = "/sha.bin"
        let url = fixture.serve(.bytes(bytes), at: path)
        let first = BodyGate(holdingAfter: 100_000)
        let second = BodyGate(holdingAfter: 100_000)
        defer {
            first.open()
            second.open()
        }
        fixture.server.enqueue(behavior: Behavior(gate: first), for: path)
        fixture.server.enqueue(behavior: Behavior(gate: second), for: path)
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let state = fixture.directory.url.appendingPathComponent("state")
        var download = DownloadFixture.configuration(retries: 0, transport: .libcurl)
        download.connections = .single
        var configuration = DownloadQueue.Configuration(maximumConcurrentDownloads: 1, download: download)
        configuration.keepsFailuresForGood = true
        let store = try TaskStore(directory: state)
        let queue = DownloadQueue(configuration: configuration, store: store)
        let events = await queue.events()
        let id = try await queue.add(
            url, destination: .directory(output), expectedSHA256: String(repeating: "0", count: 64))
        let recordFile = state.appendingPathComponent("tasks/\(id).json").path
        try #require(await first.waitUntilHeld(timeout: Waiting.deadline), "\(first)")
        _ = try #require(
            try await trickleUntilRecorded(first, recordFile: recordFile, atLeast: 100_000),
            "the record never got a token: \(first)")
        let oldFile = try #require(Self.recordToken(recordFile)?.tempPath)

        // Every record write fails from now on.
        let planted = state.appendingPathComponent("tasks/\(id).json.writing")
        try FileManager.default.createDirectory(at: planted, withIntermediateDirectories: false)
        first.open()
        var firstEnd: DownloadQueue.Event?
        var iterator = events.makeAsyncIterator()
        while let event = await iterator.next() {
            switch event {
            case .paused(id), .failed(id, _), .cancelled(id), .finished(id, _): firstEnd = event
            default: continue
            }
            break
        }
        guard case .failed(_, let mismatch)? = firstEnd, mismatch.code == .checksumMismatch else {
            Issue.record("the first run did not end in a checksum mismatch: \(String(describing: firstEnd))")
            return
        }
        try #require(store.keepsAbandonedFile(id), "the record could forget its token: nothing to attack")

        // The disk recovers; the download is resumed from byte 0 into a new file and checkpoints again.
        try FileManager.default.removeItem(at: planted)
        await queue.resume(id)
        try #require(await second.waitUntilHeld(timeout: Waiting.deadline), "\(second)")
        let checkpointed = try await waitUntil {
            if let token = Self.recordToken(recordFile), token.tempPath != oldFile, token.offset >= 100_000 {
                return true
            }
            if second.heldCount > 0 { second.advance(by: 4096) }
            return false
        }
        try #require(checkpointed, "the second run never checkpointed into the record: \(second)")
        let newCheckpoint = try #require(Self.recordToken(recordFile))

        let partial = store.partialPath
        DurableSteps.failing(.flush, under: partial, errno: EIO)
        defer { DurableSteps.failing(.flush, under: partial, errno: nil) }
        await queue.pause(id)
        var secondEnd: DownloadQueue.Event?
        while let event = await iterator.next() {
            switch event {
            case .paused(id), .failed(id, _), .cancelled(id), .finished(id, _): secondEnd = event
            default: continue
            }
            break
        }
        DurableSteps.failing(.flush, under: partial, errno: nil)
        if case .paused? = secondEnd {
        } else {
            Issue.record("the download did not pause: \(String(describing: secondEnd))")
        }
        let after = Self.recordToken(recordFile)
        #expect(
            after?.tempPath == newCheckpoint.tempPath && (after?.offset ?? 0) >= newCheckpoint.offset,
            "the record's checkpoint of \(newCheckpoint.offset) bytes in the second run's file was dropped (now: \(String(describing: after))): a resume starts from byte 0"
        )
        #expect(
            FileManager.default.fileExists(atPath: newCheckpoint.tempPath),
            "the second run's temporary file is gone")
        second.open()
        await queue.cancel(id)
        _ = await queue.waitUntilIdle()
    }
}
