import Foundation
import Testing

@testable import Resumable

@Suite("Task store: the rate of a running download, for resumable list")
struct TaskStoreRateTests {
    private static func token(offset: Int64, in store: TaskStore, file: String) -> ResumeToken {
        let date = Date(timeIntervalSince1970: 1_796_000_000)
        return ResumeToken(
            url: URL(string: "http://127.0.0.1:9/f.bin")!, originalURL: URL(string: "http://127.0.0.1:9/f.bin")!,
            offset: offset, expectedLength: 1 << 20, etag: "\"e\"", lastModified: nil, responseDate: nil,
            acceptRanges: "bytes", tempPath: (store.partialPath as NSString).appendingPathComponent(file),
            suggestedFilename: "f.bin", destination: nil, headers: [:], createdAt: date, updatedAt: date)
    }

    @Test(
        "Checkpoints record the rate between two of the same file; list calls a fresh one running, a paused one not")
    func rateBetweenCheckpoints() throws {
        let directory = try TemporaryDirectory()
        let state = directory.url.appendingPathComponent("state")
        let store = try TaskStore(directory: state)
        let id = DownloadQueue.TaskID()
        let file = TemporaryFileName.make()
        try store.save(
            TaskRecord(
                id: id, url: URL(string: "http://127.0.0.1:9/f.bin")!, destination: .directory(directory.url),
                priority: 0, order: 0, state: .queued),
            running: true)
        let start = Date(timeIntervalSince1970: 1_796_000_100)
        try store.checkpoint(id, token: Self.token(offset: 1000, in: store, file: file), now: start)
        #expect(store.record(id)?.bytesPerSecond == nil, "one checkpoint has no rate")
        try store.checkpoint(id, token: Self.token(offset: 3000, in: store, file: file), now: start + 0.5)
        #expect(store.record(id)?.bytesPerSecond == 4000)
        // A restart into another temporary file: no rate across the two files.
        try store.checkpoint(
            id, token: Self.token(offset: 10, in: store, file: TemporaryFileName.make()), now: start + 1)
        #expect(store.record(id)?.bytesPerSecond == nil)
        try store.checkpoint(id, token: Self.token(offset: 2010, in: store, file: file), now: start + 2)
        #expect(store.record(id)?.bytesPerSecond == nil, "the previous checkpoint was of another file")
        try store.checkpoint(id, token: Self.token(offset: 4010, in: store, file: file), now: start + 3)
        #expect(store.record(id)?.bytesPerSecond == 2000)

        // The store is held (this process): a fresh checkpoint is running with its rate, a stale one waiting.
        let fresh = TaskStore.listing(directory: state, now: start + 4)
        #expect(fresh.inUse)
        let item = try #require(fresh.items.first)
        guard case .running = item.state else { return #expect(Bool(false), "\(item.state)") }
        #expect(item.bytesPerSecond == 2000 && item.bytesOnDisk == 4010)
        let stale = TaskStore.listing(directory: state, now: start + 3 + TaskStore.runningCheckpointAge + 1)
        guard case .waiting = stale.items.first?.state else { return #expect(Bool(false), "\(stale.items)") }
        #expect(stale.items.first?.bytesPerSecond == 0)

        // Paused: the record keeps its token and loses its rate, on disk too.
        var paused = try #require(store.record(id))
        paused.state = .paused
        try store.save(paused, running: false)
        #expect(store.record(id)?.bytesPerSecond == nil)
        let listed = TaskStore.listing(directory: state, now: start + 4)
        guard case .paused = listed.items.first?.state else { return #expect(Bool(false), "\(listed.items)") }
        #expect(listed.items.first?.bytesPerSecond == 0)
    }

    @Test("A paused multi-connection download lists every byte its token covers, not only the offset")
    func versionTwoTokenBytes() throws {
        let directory = try TemporaryDirectory()
        let state = directory.url.appendingPathComponent("state")
        let store = try TaskStore(directory: state)
        let id = DownloadQueue.TaskID()
        let date = Date(timeIntervalSince1970: 1_796_000_000)
        let token = ResumeToken(
            url: URL(string: "http://127.0.0.1:9/f.bin")!, originalURL: URL(string: "http://127.0.0.1:9/f.bin")!,
            offset: 1000, completedRanges: [4000..<6000, 9000..<9500], expectedLength: 1 << 20, etag: "\"e\"",
            lastModified: nil, responseDate: nil, acceptRanges: "bytes",
            tempPath: (store.partialPath as NSString).appendingPathComponent(TemporaryFileName.make()),
            suggestedFilename: "f.bin", destination: nil, headers: [:], createdAt: date, updatedAt: date)
        #expect(token.bytesCovered == 3500)
        try store.save(
            TaskRecord(
                id: id, url: URL(string: "http://127.0.0.1:9/f.bin")!, destination: .directory(directory.url),
                priority: 0, order: 0, state: .paused, token: token),
            running: false)
        let listed = TaskStore.listing(directory: state)
        #expect(listed.items.map(\.bytesOnDisk) == [3500], "\(listed.items)")
    }

    @Test("Hostile rate fields in a record are refused with a typed error, never a trap")
    func hostileRateFields() throws {
        let base: [String: Any] = [
            "version": 1, "id": DownloadQueue.TaskID().description, "url": "http://127.0.0.1:9/f",
            "destination": "/tmp/", "priority": 0, "order": 0, "state": "queued",
        ]
        let cases: [(String, Any)] = [
            ("bytesPerSecond", -1), ("bytesPerSecond", 1e300), ("bytesPerSecond", "fast"),
            ("checkpointedAt", "yesterday"), ("checkpointedAt", 12), ("checkpointedAt", "2026-13-01T00:00:00Z"),
        ]
        for (key, value) in cases {
            var object = base
            object[key] = value
            let data = try JSONSerialization.data(withJSONObject: object)
            #expect(throws: (any Error).self, "\(key): \(value)") {
                try JSONDecoder().decode(TaskRecord.self, from: data)
            }
        }
        var valid = base
        valid["bytesPerSecond"] = 123
        valid["checkpointedAt"] = "2026-12-01T08:00:00.250Z"
        let record = try JSONDecoder().decode(TaskRecord.self, from: JSONSerialization.data(withJSONObject: valid))
        #expect(record.bytesPerSecond == 123)
        #expect(record.checkpointedAt == ISO8601.parse("2026-12-01T08:00:00.250Z"))
        let again = try JSONDecoder().decode(TaskRecord.self, from: JSONEncoder().encode(record))
        #expect(again == record)
    }
}
