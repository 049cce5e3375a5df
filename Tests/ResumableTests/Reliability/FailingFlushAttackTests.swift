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

/// Flushes that fail the way Linux makes them fail: `fdatasync` reports a writeback error (EIO) once; the pages that
/// could not be written are marked clean and their data is gone from the page cache, and the next `fdatasync` on the
/// file returns 0 (the PostgreSQL "fsyncgate" of 2018; errseq_t since Linux 4.13 reports an error once per open file).
/// So a flush that succeeds after one that failed proves nothing about the bytes written before the failure: no token
/// may ever claim them. The seam's `times: 1` (``DurableSteps/failing(_:under:errno:times:)``) fails the next flush
/// only.
@Suite("Attacks: a flush that fails once")
struct FailingFlushAttackTests {
    /// Offsets a checkpoint handler received, in order.
    final class Offsets: Sendable {
        private let state = Mutex<[Int64]>([])
        func append(_ offset: Int64) { state.withLock { $0.append(offset) } }
        var all: [Int64] { state.withLock { $0 } }
        var last: Int64? { state.withLock { $0.last } }
    }

    /// Lets the held body trickle until the latest checkpoint (`latest`) covers every byte the server let through,
    /// and returns its offset: the last flush that succeeded.
    static func checkpointCoveringWhatArrived(
        _ gate: BodyGate, length: Int64, latest: @escaping @Sendable () -> Int64?
    ) async throws -> Int64 {
        let covered = try await trickle(gate, bodyLength: length) {
            guard let limit = gate.limit, gate.heldCount > 0 else { return false }
            return latest() == limit
        }
        try #require(covered, "no checkpoint covered what arrived: \(String(describing: latest())), \(gate)")
        return try #require(latest())
    }

    /// A 1 MiB download on libcurl, held after 100,000 bytes, whose checkpoint handler records every offset (a
    /// checkpoint every millisecond while bytes arrive).
    static func startHeldDownload(seed: UInt64) throws -> (
        fixture: DownloadFixture, bytes: [UInt8], gate: BodyGate, offsets: Offsets, task: DownloadTask
    ) {
        let fixture = try DownloadFixture(transport: .libcurl)
        let bytes = testBytes(count: 1 << 20, seed: seed)
        let gate = fixture.serveHeld(.bytes(bytes), after: 100_000)
        let offsets = Offsets()
        var configuration = DownloadFixture.configuration(retries: 0)
        configuration.checkpointing = .init(interval: .milliseconds(1)) { token in offsets.append(token.offset) }
        return (fixture, bytes, gate, offsets, try fixture.download(configuration: configuration))
    }

    /// Set once a task's result is in.
    final class Flag: Sendable {
        private let state = Atomic<Bool>(false)
        func set() { state.store(true, ordering: .sequentiallyConsistent) }
        var isSet: Bool { state.load(ordering: .sequentiallyConsistent) }
    }

    /// Rule broken: a finished file is exactly the server's bytes (a token never claims bytes not really in the file).
    ///
    /// No checkpoint handler, so the first flush of the download is the final one, before the move into place. It
    /// fails (EIO), and the task fails; but the task's end flushes again, that flush returns 0 (as Linux's does after
    /// reporting the error), and the failure carries a token whose offset is the whole file: a "complete" token for
    /// bytes whose only flush failed. Resuming it asks for nothing more and moves that file into place as finished.
    @Test("A final flush that fails once leaves no token claiming the whole file")
    func finalFlushFailingOnceHandsOutNoCompleteToken() async throws {
        let fixture = try DownloadFixture(transport: .libcurl)
        let length = 300_000
        let bytes = testBytes(count: length, seed: 91)
        fixture.serve(.bytes(bytes))
        let prefix = fixture.directory.path
        DurableSteps.failing(.flush, under: prefix, errno: EIO, times: 1)
        defer { DurableSteps.failing(.flush, under: prefix, errno: nil) }

        let task = try fixture.download(configuration: DownloadFixture.configuration(retries: 0))
        let error = try #require(await failure(of: task))
        #expect(!DurableSteps.isFailing(.flush, under: prefix), "the final flush never ran")
        #expect(
            error.resumeToken == nil,
            "the final flush failed, yet the failure carries a token claiming \(error.resumeToken?.offset ?? -1) of \(length) bytes: \(error)"
        )
        // What that token leads to: a resume that downloads nothing and calls the unflushed file finished.
        if let token = error.resumeToken, token.offset == Int64(length) {
            fixture.server.clearRequests()
            let resumed = try await fixture.resumeThroughDisk(token).value
            let message =
                "resuming the token finished \(resumed.fileURL.lastPathComponent) after requests \(fixture.ranges()), "
                + "transferring \(resumed.bytesTransferred) bytes"
            Issue.record(Comment(rawValue: message))
        }
    }

    /// Rule broken: a token never claims bytes not really in the file; the checkpoint handler is the caller's record.
    ///
    /// A periodic checkpoint's flush fails once. The download stops (a checkpoint that cannot be made stops it), and
    /// its end flushes again: that flush returns 0, so the failure carries a token, and the handler receives one, past
    /// the last checkpoint whose flush succeeded: bytes that were in the page cache when writeback failed.
    @Test("A periodic checkpoint whose flush fails once: no later token claims the bytes that flush was for")
    func periodicCheckpointFailingOnce() async throws {
        let (fixture, bytes, gate, offsets, task) = try Self.startHeldDownload(seed: 92)
        let length = Int64(bytes.count)
        defer { gate.open() }
        let ended = Flag()
        let result = Task {
            let result = await task.result
            ended.set()
            return result
        }
        try await fixture.waitUntilHeld(at: gate, withOnDisk: 100_000)
        // A checkpoint that covers every byte the server let through: the last flush that succeeded.
        let flushed = try await Self.checkpointCoveringWhatArrived(gate, length: length) { offsets.last }
        let before = offsets.all.count

        let prefix = fixture.directory.path
        DurableSteps.failing(.flush, under: prefix, errno: EIO, times: 1)
        defer { DurableSteps.failing(.flush, under: prefix, errno: nil) }
        // Bytes arrive, a checkpoint's flush fails, and the next piece stops the download.
        let stopped = try await trickle(gate, bodyLength: length) { ended.isSet }
        try #require(stopped, "the download never stopped: \(gate)")
        #expect(!DurableSteps.isFailing(.flush, under: prefix), "no flush failed")
        guard case .failure(let error) = await result.value else {
            Issue.record("the download finished although a checkpoint failed")
            return
        }
        let handed = error.resumeToken?.offset ?? 0
        #expect(
            handed <= flushed,
            "a flush failed after the checkpoint at \(flushed), yet the failure's token claims \(handed) bytes")
        let later = Array(offsets.all.dropFirst(before))
        #expect(
            later.allSatisfy { $0 <= flushed },
            "after the failed flush the handler was given \(later), past the last flushed checkpoint \(flushed)")
    }

    /// Rule broken: a finished file is exactly the server's bytes; never a success after a flush of its bytes failed.
    ///
    /// The body's last bytes arrive at once; the periodic checkpoint they bring fails its flush (once), and so, or the
    /// final flush does. Every ending the engine can take from there breaks a rule: the checkpoint's failure is never
    /// looked at again once the body is complete, so the final flush (0, as Linux's after reporting the error) lets
    /// the file be moved into place as finished; or the final flush takes the failure, and the end's flush (0) hands
    /// out a complete token. Only "failed, with no token past the last flushed checkpoint" keeps the rules.
    @Test("A flush that fails once as the last bytes arrive: no finished file, no token claiming them")
    func lastBytesFlushFailingOnce() async throws {
        let (fixture, bytes, gate, offsets, task) = try Self.startHeldDownload(seed: 95)
        let length = Int64(bytes.count)
        defer { gate.open() }
        try await fixture.waitUntilHeld(at: gate, withOnDisk: 100_000)
        let flushed = try await Self.checkpointCoveringWhatArrived(gate, length: length) { offsets.last }
        let before = offsets.all.count

        let prefix = fixture.directory.path
        DurableSteps.failing(.flush, under: prefix, errno: EIO, times: 1)
        defer { DurableSteps.failing(.flush, under: prefix, errno: nil) }
        gate.open()
        let result = await task.result
        #expect(!DurableSteps.isFailing(.flush, under: prefix), "no flush failed")
        let later = Array(offsets.all.dropFirst(before))
        switch result {
        case .success(let download):
            let message =
                "a flush of the last \(length - flushed) bytes failed, yet \(download.fileURL.lastPathComponent) was "
                + "moved into place as finished (the handler got \(later))"
            Issue.record(Comment(rawValue: message))
        case .failure(let error):
            let handed = error.resumeToken?.offset ?? 0
            #expect(
                handed <= flushed,
                "a flush failed after the checkpoint at \(flushed), yet the failure's token claims \(handed) bytes: \(error)"
            )
            #expect(
                later.allSatisfy { $0 <= flushed },
                "after the failed flush the handler was given \(later), past the last flushed checkpoint \(flushed)")
        }
    }

    /// Rule broken: a queue's record describes bytes that are really in its temporary file (`docs/task-store.md`).
    ///
    /// As above, through a `DownloadQueue` with a `TaskStore`: a periodic checkpoint's flush fails once; the task's end
    /// flushes again (0), hands out a token past the record's last checkpoint, and the queue writes it into the record:
    /// after a crash, the restored download trusts bytes whose writeback failed.
    @Test("A queue's record never takes a token past its last flushed checkpoint after a flush failed once")
    func queueRecordAfterFlushFailingOnce() async throws {
        let fixture = try DownloadFixture(transport: .libcurl, keepAlive: true)
        defer { fixture.server.shutdown() }
        let length: Int64 = 1 << 20
        let bytes = testBytes(count: Int(length), seed: 93)
        let gate = fixture.serveHeld(.bytes(bytes), after: 100_000, at: "/held.bin")
        defer { gate.open() }
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let state = fixture.directory.url.appendingPathComponent("state")
        var configuration = DownloadFixture.configuration(retries: 0, transport: .libcurl)
        configuration.connections = .single
        configuration.checkpointing = .init(interval: .milliseconds(1)) { _ in }
        let queue = DownloadQueue(
            configuration: .init(maximumConcurrentDownloads: 1, download: configuration),
            store: try TaskStore(directory: state))
        let events = await queue.events()
        let id = try await queue.add(fixture.server.url(for: "/held.bin"), destination: .directory(output))
        let partial = state.appendingPathComponent("partial").path
        try #require(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
        try #require(try await waitUntilTemporaryFiles(in: partial, count: 1, eachHolding: 100_000))
        let recordFile = state.appendingPathComponent("tasks/\(id).json").path
        let flushed = try await Self.checkpointCoveringWhatArrived(gate, length: length) {
            recordTokenOffset(recordFile)
        }

        DurableSteps.failing(.flush, under: partial, errno: EIO, times: 1)
        defer { DurableSteps.failing(.flush, under: partial, errno: nil) }
        let ended = Flag()
        let watcher = Task { () -> DownloadQueue.Event? in
            for await event in events {
                switch event {
                case .paused(id), .failed(id, _), .cancelled(id), .finished(id, _):
                    ended.set()
                    return event
                default: continue
                }
            }
            return nil
        }
        let stopped = try await trickle(gate, bodyLength: length) { ended.isSet }
        try #require(stopped, "the download never stopped: \(gate)")
        #expect(!DurableSteps.isFailing(.flush, under: partial), "no flush failed")
        let event = await watcher.value
        let recorded = recordTokenOffset(recordFile) ?? 0
        #expect(
            recorded <= flushed,
            "a flush failed after the record's checkpoint at \(flushed), yet the record now claims \(recorded) bytes (\(String(describing: event)))"
        )
        gate.open()
        await queue.cancel(id)
        _ = await queue.waitUntilIdle()
    }

    /// Rule broken: a version 2 token lists only bytes that are really in the file.
    ///
    /// Four connections write at their segments while periodic checkpoints list the ranges. One checkpoint's flush
    /// fails once; the download stops, its end flushes again (0), and the failure's token, and the handler, list ranges
    /// past every checkpoint whose flush succeeded. Every checkpoint handed over before the failed flush ran before it
    /// (one serial queue): those the handler got while the seam was still armed are the flushed ones.
    @Test("A multi-connection checkpoint whose flush fails once: no later version 2 token lists the bytes it was for")
    func segmentedCheckpointFailingOnce() async throws {
        let fixture = try DownloadFixture(transport: .libcurl)
        let seed: UInt64 = 94
        fixture.serve(.generated(length: Segmented.total, seed: seed))
        let gate = BodyGate(holdingAfter: 16 << 10)
        fixture.server.enqueue(behavior: Behavior(gate: gate), for: Segmented.path)
        for index in 1..<4 {
            fixture.server.enqueue(
                behavior: Behavior(gate: gate), for: Segmented.path,
                whenRangeStartsAt: Segmented.start(index, of: 4))
        }
        let prefix = fixture.directory.path
        // (bytes covered, whether the failure was still to come) per checkpoint handed over.
        let seen = Mutex<[(covered: Int64, beforeFailure: Bool)]>([])
        var configuration = Segmented.configuration(.fixed(4), retries: 0)
        // Set right after the seam is armed: before that, every checkpoint handed over was flushed.
        let armed = Flag()
        configuration.checkpointing = .init(interval: .milliseconds(1)) { token in
            let before = !armed.isSet || DurableSteps.isFailing(.flush, under: prefix)
            seen.withLock { $0.append((token.bytesCovered, before)) }
        }
        let task = try fixture.download(configuration: configuration)
        let ended = Flag()
        let result = Task {
            let result = await task.result
            ended.set()
            return result
        }
        #expect(await gate.waitUntilHeld(count: 4, timeout: Waiting.deadline), "\(gate)")
        let checkpointed = try await trickle(gate, bodyLength: Segmented.start(1, of: 4)) {
            seen.withLock { $0.contains { $0.covered > 64 << 10 } }
        }
        try #require(checkpointed, "no checkpoint listed several segments: \(gate)")

        DurableSteps.failing(.flush, under: prefix, errno: EIO, times: 1)
        defer { DurableSteps.failing(.flush, under: prefix, errno: nil) }
        armed.set()
        let stopped = try await trickle(gate, bodyLength: Segmented.start(1, of: 4)) { ended.isSet }
        try #require(stopped, "the download never stopped: \(gate)")
        #expect(!DurableSteps.isFailing(.flush, under: prefix), "no flush failed")
        guard case .failure(let error) = await result.value else {
            Issue.record("the download finished although a checkpoint failed")
            return
        }
        let all = seen.withLock { $0 }
        let flushed = all.filter(\.beforeFailure).map(\.covered).max() ?? 0
        let later = all.filter { !$0.beforeFailure }.map(\.covered)
        let handed = error.resumeToken?.bytesCovered ?? 0
        #expect(
            handed <= flushed,
            "a flush failed after checkpoints covering \(flushed) bytes, yet the failure's token (version \(error.resumeToken?.version ?? 0)) covers \(handed)"
        )
        #expect(
            later.allSatisfy { $0 <= flushed },
            "after the failed flush the handler was given tokens covering \(later), past \(flushed)")
    }
}
