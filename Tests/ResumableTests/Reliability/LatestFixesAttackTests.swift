import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Adversarial review of the newest fixes: validators compared as bytes and the counter of fruitless bodies
/// (bf383a1), paths compared as bytes (38ee910), a released queue pausing its downloads (7d28737).
@Suite("Latest fixes attack: released queues, byte-compared paths, fruitless answers", .serialized)
struct LatestFixesAttackTests {
    final class WeakBox: @unchecked Sendable {
        weak var object: AnyObject?
        init(_ object: AnyObject?) { self.object = object }
    }

    static func configuration() -> DownloadTask.Configuration {
        var configuration = DownloadFixture.configuration(retries: 2, transport: .libcurl)
        configuration.connections = .single
        return configuration
    }

    /// A queue running one download held by the server after `held` bytes, with those bytes on disk.
    struct HeldQueue {
        let fixture: DownloadFixture
        let gate: BodyGate
        let bytes: [UInt8]
        let output: URL
        let state: URL
        var queue: DownloadQueue?
        let id: DownloadQueue.TaskID

        init(seed: UInt64, held: Int64 = 100_000) async throws {
            fixture = try DownloadFixture(transport: .libcurl, keepAlive: true)
            bytes = testBytes(count: 1 << 20, seed: seed)
            gate = fixture.serveHeld(.bytes(bytes), after: held, at: "/held.bin")
            output = fixture.directory.url.appendingPathComponent("out")
            try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
            state = fixture.directory.url.appendingPathComponent("state")
            let queue = DownloadQueue(
                configuration: .init(maximumConcurrentDownloads: 1, download: LatestFixesAttackTests.configuration()),
                store: try TaskStore(directory: state))
            id = try await queue.add(fixture.server.url(for: "/held.bin"), destination: .directory(output))
            self.queue = queue
            try #require(await gate.waitUntilHeld(count: 1, timeout: Waiting.deadline), "\(gate)")
            let partial = state.appendingPathComponent("partial").path
            try #require(try await waitUntilTemporaryFiles(in: partial, count: 1, eachHolding: held))
        }
    }

    // MARK: - 7d28737: a released queue

    /// `cancel(id)` of a running download promises that "its bytes are discarded and it leaves the queue". The
    /// removal of its record happens only in `ended(_:result:)`, a hop back onto the queue that a released queue
    /// never takes (`[weak self]`): the record stays in the store, `queued`, and a queue restored from the store
    /// downloads the cancelled file all over again.
    @Test("A download cancelled right before its queue is released does not come back on restore")
    func cancelThenRelease() async throws {
        var held = try await HeldQueue(seed: 71)
        defer {
            held.gate.open()
            held.fixture.server.shutdown()
        }
        let weakQueue = WeakBox(held.queue)
        await held.queue!.cancel(held.id)
        held.queue = nil
        let released = try await waitUntil { weakQueue.object == nil }
        try #require(released, "the queue was never released")
        let store = try await reopenedStore(at: held.state)
        try #require(store != nil, "the store is still held after its queue was released")
        let second = DownloadQueue(configuration: .init(download: Self.configuration()), store: store)
        #expect(await second.restore().isEmpty)
        let items = await second.items
        #expect(
            !items.contains { $0.id == held.id },
            "the cancelled download came back on restore: \(items.map { "\($0.id) \($0.state)" })")
        held.gate.open()
        _ = await second.waitUntilIdle()
        let finished = (try? FileManager.default.contentsOfDirectory(atPath: held.output.path)) ?? []
        #expect(finished.isEmpty, "the cancelled download was downloaded again after the restore: \(finished)")
    }

    /// `pause(id)` of a running download writes `paused` into its record only when the task ends, in
    /// `ended(_:result:)`, which a released queue never reaches: the record stays `queued`, and the restored queue
    /// starts the download the user paused.
    @Test("A download paused right before its queue is released stays paused on restore")
    func pauseThenRelease() async throws {
        var held = try await HeldQueue(seed: 72)
        defer {
            held.gate.open()
            held.fixture.server.shutdown()
        }
        let weakQueue = WeakBox(held.queue)
        await held.queue!.pause(held.id)
        held.queue = nil
        let released = try await waitUntil { weakQueue.object == nil }
        try #require(released, "the queue was never released")
        let store = try await reopenedStore(at: held.state)
        try #require(store != nil, "the store is still held after its queue was released")
        let second = DownloadQueue(configuration: .init(download: Self.configuration()), store: store)
        #expect(await second.restore().isEmpty)
        let items = await second.items
        let item = items.first { $0.id == held.id }
        try #require(item != nil, "the paused download was lost: \(items.map(\.id))")
        if case .paused = item!.state {
        } else {
            Issue.record("the download paused before the release runs again after the restore: \(item!.state)")
        }
        // Whatever happened, nothing downloaded is lost and the file ends exact.
        held.gate.open()
        await second.resumeAll()
        let summary = await second.waitUntilIdle()
        #expect(summary.finished == 1, "\(summary)")
        let url = held.output.appendingPathComponent("held.bin")
        expectSameBytes((try? held.fixture.contents(of: url)), held.bytes)
    }

    // MARK: - 38ee910: paths compared as bytes

    /// A cancelled download's temporary file is removed when "it is the store's": `discardTemporaryFile(of:)`
    /// (DownloadQueue.swift) compares the token's directory with `store.partialPath` by `String ==`, which holds a
    /// directory spelled `Cafe\u{301}` equal to `Caf\u{E9}`, two directories on Linux; and
    /// `removeUnownedTemporaryFiles(keeping:only:)` then removes the file *of that name in the store's own
    /// `partial/`*. A record whose token names a file in the look-alike directory thus deletes, when cancelled,
    /// another (paused) download's bytes that happen to bear the same name.
    @Test("Cancelling a record whose file is in a canonically equivalent directory keeps another record's bytes")
    func cancelLookAlikeDirectory() async throws {
        let fixture = try DownloadFixture(transport: .libcurl, keepAlive: true)
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 1 << 20, seed: 73)
        let gate = fixture.serveHeld(.bytes(bytes), after: 100_000, at: "/held.bin")
        defer { gate.open() }
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let composed = "Caf\u{E9}-state"
        let decomposed = "Cafe\u{301}-state"
        #expect(composed == decomposed && !composed.utf8.elementsEqual(decomposed.utf8))
        let state = fixture.directory.url.appendingPathComponent(composed)
        let twin = fixture.directory.url.appendingPathComponent(decomposed)

        // A download paused with 100,000 bytes on disk: its record is the store's.
        var first: DownloadQueue? = DownloadQueue(
            configuration: .init(maximumConcurrentDownloads: 1, download: Self.configuration()),
            store: try TaskStore(directory: state))
        let id = try await first!.add(fixture.server.url(for: "/held.bin"), destination: .directory(output))
        try #require(await gate.waitUntilHeld(count: 1, timeout: Waiting.deadline), "\(gate)")
        let partial = state.appendingPathComponent("partial").path
        try #require(try await waitUntilTemporaryFiles(in: partial, count: 1, eachHolding: 100_000))
        await first!.pause(id)
        _ = await first!.waitUntilIdle()
        first = nil
        var store = try await reopenedStore(at: state)
        try #require(store != nil)

        // A second record, crafted: its token names a file of the same name in the look-alike directory.
        let tasks = state.appendingPathComponent("tasks")
        let recordData = try Data(contentsOf: tasks.appendingPathComponent("\(id).json"))
        var record = try #require(try JSONSerialization.jsonObject(with: recordData) as? [String: Any])
        var token = try #require(record["token"] as? [String: Any])
        let tempPath = try #require(token["tempPath"] as? String)
        #expect(FileManager.default.fileExists(atPath: tempPath))
        let name = (tempPath as NSString).lastPathComponent
        let twinPartial = twin.appendingPathComponent("partial")
        try FileManager.default.createDirectory(at: twinPartial, withIntermediateDirectories: true)
        let twinFile = twinPartial.appendingPathComponent(name).path
        try FileManager.default.copyItem(atPath: tempPath, toPath: twinFile)
        let craftedID = UUID().uuidString.lowercased()
        token["tempPath"] = twinFile
        record["token"] = token
        record["id"] = craftedID
        record["order"] = ((record["order"] as? Int) ?? 0) + 1
        let crafted = try JSONSerialization.data(withJSONObject: record, options: [.sortedKeys])
        try crafted.write(to: tasks.appendingPathComponent("\(craftedID).json"))

        // Since f53acf1 a store points every token at its own `partial/`: the crafted record then names the paused
        // download's very file, and both records are refused (two downloads in one file would splice), with nothing
        // removed. Before, the crafted record was restored and its cancel deleted the paused download's bytes.
        var second: DownloadQueue? = DownloadQueue(configuration: .init(download: Self.configuration()), store: store)
        let problems = await second!.restore()
        #expect(problems.count == 2, "\(problems)")
        #expect(await second!.items.isEmpty)
        #expect(FileManager.default.fileExists(atPath: tempPath), "the restore removed the paused download's file")
        // The crafted record goes (by hand, as the problems ask); the paused download is then restored.
        try FileManager.default.removeItem(at: tasks.appendingPathComponent("\(craftedID).json"))
        second = nil
        store = nil
        let reopened = try await reopenedStore(at: state)
        try #require(reopened != nil)
        let third = DownloadQueue(configuration: .init(download: Self.configuration()), store: reopened)
        #expect(await third.restore().isEmpty)
        try #require(await third.items.map(\.id) == [id])
        #expect(FileManager.default.fileExists(atPath: tempPath))

        // The paused download continues from its bytes, and its file is exact.
        gate.open()
        await third.resume(id)
        let summary = await third.waitUntilIdle()
        #expect(summary.finished == 1, "\(summary)")
        expectSameBytes((try? fixture.contents(of: output.appendingPathComponent("held.bin"))), bytes)
        #expect(
            fixture.ranges("/held.bin").last == "bytes=100000-",
            "the paused download started over: \(fixture.ranges("/held.bin"))")
    }
}
