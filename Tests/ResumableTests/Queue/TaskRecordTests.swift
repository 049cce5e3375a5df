import Foundation
import Testing

@testable import Resumable

/// `TaskRecord` keeps its fields on the heap, shared by its copies until one changes (copy on write): the store
/// holds each record twice (as last written, and as on disk) and decides from their difference whether to write.
@Suite("Task record: copies stay independent")
struct TaskRecordTests {
    private static func token(tempPath: String) -> ResumeToken {
        .sample(tempPath: tempPath)
    }

    @Test("Changing a copy leaves the original as it was")
    func copiesAreIndependent() {
        let original = TaskRecord(
            id: DownloadQueue.TaskID(), url: URL(string: "http://127.0.0.1:9/f.bin")!,
            destination: .directory(URL(fileURLWithPath: "/tmp")), priority: 0, order: 0, state: .queued)
        var copy = original
        #expect(copy == original)
        copy.token = Self.token(tempPath: "/tmp/partial/.resumable-x.partial")
        copy.priority = 3
        copy.state = .paused
        copy.checkpointedAt = Date(timeIntervalSince1970: 1_796_000_000)
        #expect(original.token == nil && original.priority == 0 && original.state == .queued)
        #expect(original.checkpointedAt == nil)
        #expect(copy != original)
        var again = original
        again.priority = 3
        #expect(again != original && again.priority == 3)
        again.priority = 0
        #expect(again == original, "equal fields in two storages are equal records")
    }

    /// Rule 4 (a record describes bytes really in the file): a download paused before its first byte makes the
    /// store forget its token (`forgetToken`) and then write the record without it. The store compares that
    /// record with the copy it knows is on disk; had forgetting the token changed that copy too (storage shared,
    /// not copied), the two would look equal, the write would be skipped, and the record on disk would keep
    /// naming a temporary file that is gone.
    @Test("Forgetting a token in memory does not change the store's copy of what is on disk")
    func forgetTokenThenSaveWrites() throws {
        let directory = try TemporaryDirectory()
        let store = try TaskStore(directory: directory.url.appendingPathComponent("state"))
        let id = DownloadQueue.TaskID()
        let base = TaskRecord(
            id: id, url: URL(string: "http://127.0.0.1:9/f.bin")!, destination: .directory(directory.url),
            priority: 0, order: 0, state: .queued)
        var withToken = base
        withToken.token = Self.token(tempPath: store.partialPath + "/" + TemporaryFileName.make())
        try store.save(withToken, running: true)
        store.forgetToken(id)
        #expect(store.record(id)?.token == nil)
        // The same record but for the token: only the copy of what is on disk tells them apart.
        try store.save(base, running: false)
        let (records, problems) = store.load()
        #expect(problems.isEmpty, "\(problems)")
        let onDisk = try #require(records.first)
        #expect(onDisk.token == nil, "the record on disk still names \(onDisk.token?.tempPath ?? "")")
    }
}
