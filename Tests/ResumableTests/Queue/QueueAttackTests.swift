import Foundation
import LoopbackServer
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review of issue 11 (DownloadQueue, TaskStore): each test states a rule and fails while it is broken.
@Suite("Queue attack: a store's records and temporary files under pause, restore and early stops")
struct QueueAttackTests {
    static func partialFiles(_ store: TaskStore) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: store.partialPath)) ?? []).filter {
            TemporaryFileName.isValid($0)
        }
    }

    /// `restore()` keeps only the temporary files of records it brings back *now*; the records of downloads the
    /// queue already holds are skipped, so a paused download's temporary file (unlocked: its task ended) is
    /// deleted as an orphan, and its resume downloads everything again from byte 0.
    @Test("restore() on a queue that holds a paused download keeps its temporary file; the resume continues at 100000")
    func restoreAgainKeepsPausedTemporaryFile() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 256 << 10, seed: 7)
        let url = fixture.serve(.bytes(bytes), at: "/paused.bin")
        let gate = BodyGate(holdingAfter: 100_000)
        fixture.server.enqueue(behavior: Behavior(gate: gate), for: "/paused.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let store = try TaskStore(directory: fixture.directory.url.appendingPathComponent("state"))
        let queue = DownloadQueue(configuration: .init(download: DownloadFixture.configuration()), store: store)
        #expect(await queue.restore().isEmpty)
        let id = try await queue.add(url, destination: .directory(output))
        #expect(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
        #expect(try await waitUntilTemporaryFiles(in: store.partialPath, count: 1, eachHolding: 100_000))
        await queue.pause(id)
        _ = await queue.waitUntilIdle()
        gate.open()
        #expect(store.record(id)?.token?.offset == 100_000)
        #expect(Self.partialFiles(store).count == 1)

        // A second restore (an application that restores on every "reload", or after adding): nothing to bring back.
        await queue.restore()
        #expect(Self.partialFiles(store).count == 1, "the paused download's 100000 bytes were deleted")

        await queue.resume(id)
        let summary = await queue.waitUntilIdle()
        #expect(summary.finished == 1)
        try expectSameBytes(fixture.contents(of: output.appendingPathComponent("paused.bin")), bytes)
        #expect(
            fixture.server.requests(for: "/paused.bin").last?.header("Range") == "bytes=100000-",
            "downloaded again from 0")
    }

    /// A download paused after its response head but before its first body byte ends with `.paused` and no token
    /// (nothing is on disk). The queue takes "an error without a token" for a permanent failure: the download
    /// leaves the queue as *failed* and its record is removed, so a batch interrupted at that instant forgets it.
    @Test("A download paused before its first byte stays in the queue, paused, with its record; nothing failed")
    func pauseBeforeFirstByte() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 64 << 10, seed: 8)
        let url = fixture.serve(.bytes(bytes), at: "/early.bin")
        let gate = BodyGate(holdingAfter: 0)
        fixture.server.enqueue(behavior: Behavior(gate: gate), for: "/early.bin")
        let store = try TaskStore(directory: fixture.directory.url.appendingPathComponent("state"))
        let queue = DownloadQueue(configuration: .init(download: DownloadFixture.configuration()), store: store)
        let id = try await queue.add(url, destination: .directory(fixture.directory.url))
        #expect(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
        await queue.pauseAll()
        let summary = await queue.waitUntilIdle()
        gate.open()
        #expect(summary.failed == 0, "\(summary)")
        #expect(summary.waitingForResume == 1, "\(summary)")
        #expect(await queue.items.map(\.id) == [id], "the paused download left the queue")
        #expect(store.record(id)?.state == .paused, "its record was removed: a restart forgets it")
        await queue.resume(id)
        #expect(await queue.waitUntilIdle().finished == 1)
    }

    /// `start()` makes the `DownloadTask` (which starts at once and locks the temporary file) before it writes the
    /// record; when that write fails, the queue reports the download failed *without a token*, removes its entry
    /// and its record, and never cancels the task: it runs on untracked, and the paused bytes lose their record
    /// (the next `restore()` deletes them as an orphan once the task lets go).
    @Test("A store write failing as a paused download starts again: its record stays, and nothing runs untracked")
    func storeWriteFailureAtStart() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 256 << 10, seed: 9)
        let url = fixture.serve(.bytes(bytes), at: "/store.bin")
        let first = BodyGate(holdingAfter: 100_000)
        let second = BodyGate(holdingAfter: 0)
        fixture.server.enqueue(behavior: Behavior(gate: first), for: "/store.bin")
        fixture.server.enqueue(behavior: Behavior(gate: second), for: "/store.bin")
        defer { second.open() }
        let store = try TaskStore(directory: fixture.directory.url.appendingPathComponent("state"))
        let queue = DownloadQueue(configuration: .init(download: DownloadFixture.configuration()), store: store)
        let id = try await queue.add(url, destination: .directory(fixture.directory.url))
        #expect(await first.waitUntilHeld(timeout: Waiting.deadline), "\(first)")
        await queue.pause(id)
        _ = await queue.waitUntilIdle()
        first.open()
        let temporary = try #require(store.record(id)?.token?.tempPath)
        #expect(store.record(id)?.token?.offset == 100_000)

        // The next record write fails (a directory where the atomic write puts its sibling; as root, chmod cannot).
        let blocker = URL(fileURLWithPath: store.tasksPath).appendingPathComponent("\(id).json.writing")
        try FileManager.default.createDirectory(at: blocker, withIntermediateDirectories: false)
        try Data("x".utf8).write(to: blocker.appendingPathComponent("keep"))
        await queue.resume(id)
        let summary = await queue.waitUntilIdle()
        try FileManager.default.removeItem(at: blocker)

        let descriptor = open(temporary, O_RDONLY | O_CLOEXEC)
        defer { if descriptor >= 0 { close(descriptor) } }
        #expect(descriptor >= 0, "the paused bytes are gone")
        #expect(
            flock(descriptor, LOCK_EX | LOCK_NB) == 0,
            "the queue is idle (\(summary)) but a download it dropped still holds \(temporary)")
        #expect(
            FileManager.default.fileExists(
                atPath: URL(fileURLWithPath: store.tasksPath)
                    .appendingPathComponent("\(id).json").path),
            "the record of 100000 bytes on disk was removed after a failed write")
    }

    /// A paused download with 100000 bytes in the store at `state`; returns its record file and temporary file.
    private static func pausedDownload(
        _ fixture: DownloadFixture, state: URL
    ) async throws -> (record: URL, temporary: String) {
        let bytes = testBytes(count: 256 << 10, seed: 9)
        let url = fixture.serve(.bytes(bytes), at: "/kept.bin")
        let gate = BodyGate(holdingAfter: 100_000)
        fixture.server.enqueue(behavior: Behavior(gate: gate), for: "/kept.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let store = try TaskStore(directory: state)
        let queue = DownloadQueue(configuration: .init(download: DownloadFixture.configuration()), store: store)
        let id = try await queue.add(url, destination: .directory(output))
        #expect(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
        #expect(try await waitUntilTemporaryFiles(in: store.partialPath, count: 1, eachHolding: 100_000))
        await queue.pause(id)
        _ = await queue.waitUntilIdle()
        gate.open()
        let temporary = try #require(store.record(id)?.token?.tempPath)
        #expect(store.record(id)?.token?.offset == 100_000)
        return (state.appendingPathComponent("tasks/\(id).json"), temporary)
    }

    /// The JSON object of the record file at `url`.
    private static func recordObject(at url: URL) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
    }

    /// The store at `state` opened again by a new queue, as a new process would, and restored.
    private static func restored(
        _ state: URL
    ) async throws -> (store: TaskStore, queue: DownloadQueue, problems: [TaskStore.Problem]) {
        let store = try TaskStore(directory: state)
        let queue = DownloadQueue(configuration: .init(download: DownloadFixture.configuration()), store: store)
        return (store, queue, await queue.restore())
    }

    /// `restore()` removed every temporary file no *readable* record named: a record it could not read (written by
    /// a newer version of the library, or damaged) lost its download's bytes.
    @Test("A record restore() cannot read keeps its temporary file: nothing is removed while one is unreadable")
    func unreadableRecordKeepsItsFile() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let state = fixture.directory.url.appendingPathComponent("state")
        let (record, temporary) = try await Self.pausedDownload(fixture, state: state)
        // A newer library's record for the same download.
        var object = try Self.recordObject(at: record)
        object["version"] = 2
        try JSONSerialization.data(withJSONObject: object).write(to: record)

        let (store, _, problems) = try await Self.restored(state)
        #expect(problems.map(\.error.code) == [.newerTokenVersion])
        #expect(FileManager.default.fileExists(atPath: temporary), "the unreadable record's 100000 bytes were deleted")
        #expect(Self.partialFiles(store).count == 1)
    }

    /// Two records whose tokens name one temporary file would resume two downloads into it, each writing its bytes
    /// at its own offsets: a spliced file.
    @Test("Records that name the same temporary file are all refused, and the file is kept")
    func sharedTemporaryFileIsRefused() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let state = fixture.directory.url.appendingPathComponent("state")
        let (record, temporary) = try await Self.pausedDownload(fixture, state: state)
        var object = try Self.recordObject(at: record)
        let twin = DownloadQueue.TaskID()
        object["id"] = twin.description
        object["url"] = fixture.server.url(for: "/other.bin").absoluteString
        try JSONSerialization.data(withJSONObject: object).write(
            to: state.appendingPathComponent("tasks/\(twin).json"))

        let (_, queue, problems) = try await Self.restored(state)
        #expect(problems.count == 2, "\(problems)")
        #expect(problems.allSatisfy { "\($0.error)".contains("another record") }, "\(problems)")
        #expect(await queue.items.isEmpty)
        #expect(FileManager.default.fileExists(atPath: temporary))
        #expect(fixture.server.requests(for: "/other.bin").isEmpty)
    }
}
