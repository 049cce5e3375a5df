import Foundation
import Testing

@testable import Resumable

/// Stop twenty-one: `resumable list` counts every byte a version 2 token covers (`bytesCovered`), but the rate it
/// shows next to that count is still taken from the offset alone.
@Suite("Stop twenty-one: the rate of a multi-connection download in resumable list")
struct StopTwentyOneAttackTests {
    private static func token(
        offset: Int64, ranges: [Range<Int64>], in store: TaskStore, file: String
    ) -> ResumeToken {
        let date = Date(timeIntervalSince1970: 1_796_000_000)
        return ResumeToken(
            url: URL(string: "http://127.0.0.1:9/f.bin")!, originalURL: URL(string: "http://127.0.0.1:9/f.bin")!,
            offset: offset, completedRanges: ranges, expectedLength: 1 << 30, etag: "\"e\"", lastModified: nil,
            responseDate: nil, acceptRanges: "bytes",
            tempPath: (store.partialPath as NSString).appendingPathComponent(file), suggestedFilename: "f.bin",
            destination: nil, headers: [:], createdAt: date, updatedAt: date)
    }

    @Test("A running download whose other connections wrote 2 MB in a second is listed at the rate they wrote it")
    func rateCountsEveryCoveredByte() throws {
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
        // Four connections: the first one (at the offset) stalls, the three others each write ~700 kB in a second.
        let first = Self.token(
            offset: 1000, ranges: [100_000_000..<100_000_100, 200_000_000..<200_000_100, 300_000_000..<300_000_100],
            in: store, file: file)
        let second = Self.token(
            offset: 1000, ranges: [100_000_000..<100_700_100, 200_000_000..<200_700_100, 300_000_000..<300_700_100],
            in: store, file: file)
        try store.checkpoint(id, token: first, now: start)
        try store.checkpoint(id, token: second, now: start + 1)
        #expect(second.bytesCovered - first.bytesCovered == 2_100_000)

        let listed = TaskStore.listing(directory: state, now: start + 1.5)
        let item = try #require(listed.items.first)
        guard case .running = item.state else { return #expect(Bool(false), "\(item.state)") }
        #expect(item.bytesOnDisk == second.bytesCovered)
        // `list` prints "running  <bytes covered>  0 B/s" for a download that just wrote 2.1 MB in a second.
        #expect(item.bytesPerSecond == 2_100_000, "listed rate \(item.bytesPerSecond) B/s")
    }

    @Test("A prefix that absorbs a range already on disk is not listed as bytes received in that second")
    func rateDoesNotCountAbsorbedRanges() throws {
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
        // The first connection closes a 1000-byte gap in a second: the prefix absorbs the 500 MB range after it.
        let first = Self.token(offset: 1000, ranges: [2000..<500_000_000], in: store, file: file)
        let second = Self.token(offset: 500_000_000, ranges: [], in: store, file: file)
        try store.checkpoint(id, token: first, now: start)
        try store.checkpoint(id, token: second, now: start + 1)
        #expect(second.bytesCovered - first.bytesCovered == 1000)

        let listed = TaskStore.listing(directory: state, now: start + 1.5)
        let item = try #require(listed.items.first)
        guard case .running = item.state else { return #expect(Bool(false), "\(item.state)") }
        // `list` prints 500 MB/s for a download that received 1000 bytes in that second.
        #expect(item.bytesPerSecond == 1000, "listed rate \(item.bytesPerSecond) B/s")
    }
}
