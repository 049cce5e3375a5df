import Foundation
import Testing

@testable import Resumable

@Suite("Task store: the rate of a running download, for resumable list")
struct TaskStoreRateTests {
    private static func token(
        offset: Int64, ranges: [Range<Int64>] = [], in store: TaskStore, file: String
    ) -> ResumeToken {
        let date = Date(timeIntervalSince1970: 1_796_000_000)
        return ResumeToken(
            url: URL(string: "http://127.0.0.1:9/f.bin")!, originalURL: URL(string: "http://127.0.0.1:9/f.bin")!,
            offset: offset, completedRanges: ranges, expectedLength: 1 << 30, etag: "\"e\"", lastModified: nil,
            responseDate: nil, acceptRanges: "bytes",
            tempPath: (store.partialPath as NSString).appendingPathComponent(file), suggestedFilename: "f.bin",
            destination: nil, headers: [:], createdAt: date, updatedAt: date)
    }

    /// A store in a new directory's `state/`, holding one record of a running download.
    private static func storeWithRunningRecord(
        in directory: TemporaryDirectory
    ) throws -> (state: URL, store: TaskStore, id: DownloadQueue.TaskID) {
        let state = directory.url.appendingPathComponent("state")
        let store = try TaskStore(directory: state)
        let id = DownloadQueue.TaskID()
        try store.save(
            TaskRecord(
                id: id, url: URL(string: "http://127.0.0.1:9/f.bin")!, destination: .directory(directory.url),
                priority: 0, order: 0, state: .queued),
            running: true)
        return (state, store, id)
    }

    /// Two checkpoints of one file a second apart, then the listing half a second later: the running item.
    private static func listedAfter(
        _ tokens: (ResumeToken, ResumeToken), state: URL, store: TaskStore, id: DownloadQueue.TaskID
    ) throws -> DownloadQueue.Item {
        let start = Date(timeIntervalSince1970: 1_796_000_100)
        try store.checkpoint(id, token: tokens.0, now: start)
        try store.checkpoint(id, token: tokens.1, now: start + 1)
        let item = try #require(TaskStore.listing(directory: state, now: start + 1.5).items.first)
        guard case .running = item.state else {
            Issue.record("\(item.state)")
            return item
        }
        return item
    }

    @Test(
        "Checkpoints record the rate between two of the same file; list calls a fresh one running, a paused one not")
    func rateBetweenCheckpoints() throws {
        let directory = try TemporaryDirectory()
        let (state, store, id) = try Self.storeWithRunningRecord(in: directory)
        let file = TemporaryFileName.make()
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
        let (state, store, id) = try Self.storeWithRunningRecord(in: directory)
        let token = Self.token(
            offset: 1000, ranges: [4000..<6000, 9000..<9500], in: store, file: TemporaryFileName.make())
        #expect(token.bytesCovered == 3500)
        var record = try #require(store.record(id))
        record.state = .paused
        record.token = token
        try store.save(record, running: false)
        let listed = TaskStore.listing(directory: state)
        #expect(listed.items.map(\.bytesOnDisk) == [3500], "\(listed.items)")
    }

    /// helper-54: the rate beside that count came from the offset alone.
    @Test("A running download whose other connections wrote 2.1 MB in a second is listed at the rate they wrote it")
    func rateCountsEveryCoveredByte() throws {
        let directory = try TemporaryDirectory()
        let (state, store, id) = try Self.storeWithRunningRecord(in: directory)
        let file = TemporaryFileName.make()
        // Four connections: the first one (at the offset) stalls, the three others each write 700 kB in a second.
        let first = Self.token(
            offset: 1000, ranges: [100_000_000..<100_000_100, 200_000_000..<200_000_100, 300_000_000..<300_000_100],
            in: store, file: file)
        let second = Self.token(
            offset: 1000, ranges: [100_000_000..<100_700_100, 200_000_000..<200_700_100, 300_000_000..<300_700_100],
            in: store, file: file)
        let item = try Self.listedAfter((first, second), state: state, store: store, id: id)
        #expect(item.bytesOnDisk == second.bytesCovered)
        #expect(item.bytesPerSecond == 2_100_000, "listed rate \(item.bytesPerSecond) B/s")
    }

    @Test("A prefix that absorbs a range already on disk is not listed as bytes received in that second")
    func rateDoesNotCountAbsorbedRanges() throws {
        let directory = try TemporaryDirectory()
        let (state, store, id) = try Self.storeWithRunningRecord(in: directory)
        let file = TemporaryFileName.make()
        // The first connection closes a 1000-byte gap in a second: the prefix absorbs the 500 MB range after it.
        let first = Self.token(offset: 1000, ranges: [2000..<500_000_000], in: store, file: file)
        let second = Self.token(offset: 500_000_000, in: store, file: file)
        let item = try Self.listedAfter((first, second), state: state, store: store, id: id)
        #expect(item.bytesPerSecond == 1000, "listed rate \(item.bytesPerSecond) B/s")
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
