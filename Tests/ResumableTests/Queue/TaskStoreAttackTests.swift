import Foundation
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review of the task store's changes of the day (stripes, shared temporary files, restore's clean-up).
@Suite("Task store attack: one temporary file in two spellings, and a save racing a checkpoint")
struct TaskStoreAttackTests {
    private static func token(in store: TaskStore, tempPath: String, offset: Int64) -> ResumeToken {
        let date = Date(timeIntervalSince1970: 1_796_000_000)
        return ResumeToken(
            url: URL(string: "http://127.0.0.1:9/f.bin")!, originalURL: URL(string: "http://127.0.0.1:9/f.bin")!,
            offset: offset, expectedLength: 1 << 20, etag: "\"e\"", lastModified: nil, responseDate: nil,
            acceptRanges: "bytes", tempPath: tempPath, suggestedFilename: "f.bin", destination: nil, headers: [:],
            createdAt: date, updatedAt: date)
    }

    /// Writes a record file into `state/tasks` as a crafted (or older, or hand-edited) store would hold it.
    private static func writeRecord(_ record: TaskRecord, into state: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let file = state.appendingPathComponent("tasks").appendingPathComponent("\(record.id).json")
        try encoder.encode(record).write(to: file)
    }

    /// Rule 1 (never splice) and rule 3 (outside data): `load()` refuses records that name one temporary file, but
    /// compares the paths as strings. `partial//.resumable-X.partial` and `partial/./.resumable-X.partial` pass the
    /// token's checks (absolute, no `..`, a temporary file's name) and name the very file `partial/.resumable-X.partial`
    /// names: all three records are accepted, and two resumes are handed the same file.
    @Test("Records naming one temporary file through '//' or '/./' are all refused")
    func aliasedTemporaryFileIsShared() throws {
        let directory = try TemporaryDirectory()
        let state = directory.url.appendingPathComponent("state")
        let store = try TaskStore(directory: state)
        let name = TemporaryFileName.make()
        let spellings = [
            store.partialPath + "/" + name, store.partialPath + "//" + name, store.partialPath + "/./" + name,
        ]
        for (index, path) in spellings.enumerated() {
            try Self.writeRecord(
                TaskRecord(
                    id: DownloadQueue.TaskID(), url: URL(string: "http://127.0.0.1:9/f.bin")!,
                    destination: .directory(directory.url), priority: 0, order: Int64(index), state: .paused,
                    token: Self.token(in: store, tempPath: path, offset: 1000)),
                into: state)
        }
        let (records, problems) = store.load()
        #expect(records.isEmpty, "accepted: \(records.compactMap { $0.token?.tempPath })")
        #expect(problems.count == 3, "\(problems)")
    }

    /// Rule 2 (nothing downloaded is lost without need): `restore()` keeps the temporary files the records name,
    /// comparing the records' paths as strings with `partial/NAME`. A record whose token names its file as
    /// `partial//NAME` (the same file) does not keep it: restore deletes the download's bytes, and its resume starts
    /// again from byte 0.
    @Test("restore() keeps the temporary file a record names, whatever the spelling of its path")
    func restoreKeepsAliasedTemporaryFile() async throws {
        let directory = try TemporaryDirectory()
        let state = directory.url.appendingPathComponent("state")
        let store = try TaskStore(directory: state)
        let name = TemporaryFileName.make()
        let canonical = store.partialPath + "/" + name
        try Data(repeating: 7, count: 1000).write(to: URL(fileURLWithPath: canonical))
        try Self.writeRecord(
            TaskRecord(
                id: DownloadQueue.TaskID(), url: URL(string: "http://127.0.0.1:9/f.bin")!,
                destination: .directory(directory.url), priority: 0, order: 0, state: .paused,
                token: Self.token(in: store, tempPath: store.partialPath + "//" + name, offset: 1000)),
            into: state)
        let queue = DownloadQueue(configuration: .init(download: DownloadFixture.configuration()), store: store)
        let problems = await queue.restore()
        #expect(problems.isEmpty, "\(problems)")
        #expect(FileManager.default.fileExists(atPath: canonical), "restore deleted the paused download's 1000 bytes")
    }

    /// Rule 2: `DownloadQueue.persist` (a priority change or a move of a running download, and the pause that
    /// follows) read the record with `store.record(id)` and wrote it with `save` later, outside the record's stripe:
    /// a checkpoint landing in between was overwritten by the older token read before it — on disk, where a crash
    /// then resumes from the older offset, or from a temporary file the download already left (its new file is then
    /// removed as unowned by the next restore). The interleaving is reproduced step by step on the store: what
    /// `persist` now does (`keepingCheckpoint: true`) keeps the newer checkpoint.
    @Test("A record written from a snapshot taken before a checkpoint keeps that checkpoint")
    func saveAfterCheckpointKeepsIt() throws {
        let directory = try TemporaryDirectory()
        let state = directory.url.appendingPathComponent("state")
        let store = try TaskStore(directory: state)
        let id = DownloadQueue.TaskID()
        let base = TaskRecord(
            id: id, url: URL(string: "http://127.0.0.1:9/f.bin")!, destination: .directory(directory.url),
            priority: 0, order: 0, state: .queued)
        try store.save(base, running: true)
        let old = store.partialPath + "/" + TemporaryFileName.make()
        let new = store.partialPath + "/" + TemporaryFileName.make()
        try store.checkpoint(id, token: Self.token(in: store, tempPath: old, offset: 1000))
        // persist(): reads the record...
        var snapshot = try #require(store.record(id))
        snapshot.priority = 5
        // ...a restart into a new file is checkpointed meanwhile...
        try store.checkpoint(id, token: Self.token(in: store, tempPath: new, offset: 4000))
        // ...and the record read before it is written.
        try store.save(snapshot, running: true, keepingCheckpoint: true)
        let (records, _) = store.load()
        let onDisk = try #require(records.first)
        #expect(onDisk.priority == 5)
        #expect(onDisk.token?.tempPath == new && onDisk.token?.offset == 4000, "\(String(describing: onDisk.token))")
    }
}
