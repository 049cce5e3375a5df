import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Adversarial review of the released queue (7d28737, 1dbc533) and of the one-queue-per-store rule it relies on.
@Suite("Queue release attack: one store, two queues", .serialized)
struct QueueReleaseAttackTests {
    static func configuration() -> DownloadTask.Configuration {
        var configuration = DownloadFixture.configuration(retries: 2, transport: .libcurl)
        configuration.connections = .single
        return configuration
    }

    /// Rule broken: nothing downloaded is lost without need (a token and a temporary file that resume from where the
    /// data stopped), and one queue per store (`docs/task-store.md`: "the second must fail cleanly").
    ///
    /// The store's `flock` keeps a second `TaskStore` off the directory, but nothing keeps a second `DownloadQueue`
    /// off the same `TaskStore` object: `DownloadQueue.init(configuration:store:)` takes any store. The second queue's
    /// `restore()` loads the first queue's records, starts the running download again, and that start fails with
    /// `tokenInUse` (the first queue's task holds the temporary file); `ended(_:result:)` treats it as a failure
    /// without a token and calls `store.remove(id)` (DownloadQueue.swift, the last `else` of `ended`): the record of a
    /// download that is running, with 100,000 bytes on disk, is deleted. Its later checkpoints are dropped (it no
    /// longer accepts any), so when the first queue is released the pause's token goes nowhere, and the next restore
    /// removes its temporary file as unowned: the bytes are gone.
    @Test("A second queue on the same TaskStore never deletes the record of the first queue's running download")
    func secondQueueOnSameStore() async throws {
        let fixture = try DownloadFixture(transport: .libcurl, keepAlive: true)
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 1 << 20, seed: 111)
        let gate = fixture.serveHeld(.bytes(bytes), after: 100_000, at: "/held.bin")
        defer { gate.open() }
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let state = fixture.directory.url.appendingPathComponent("state")
        var store: TaskStore? = try TaskStore(directory: state)
        var first: DownloadQueue? = DownloadQueue(
            configuration: .init(maximumConcurrentDownloads: 1, download: Self.configuration()), store: store)
        let id = try await first!.add(fixture.server.url(for: "/held.bin"), destination: .directory(output))
        try #require(await gate.waitUntilHeld(count: 1, timeout: Waiting.deadline), "\(gate)")
        let partial = state.appendingPathComponent("partial").path
        try #require(try await waitUntilTemporaryFiles(in: partial, count: 1, eachHolding: 100_000))
        let recordFile = state.appendingPathComponent("tasks/\(id).json").path
        try #require(FileManager.default.fileExists(atPath: recordFile))
        let checkpointed = try await trickleUntilRecorded(gate, recordFile: recordFile, atLeast: 100_000)
        try #require(checkpointed != nil, "the record never got a token: \(gate)")

        // The mistake: a second queue on the same store object. It may refuse, or restore nothing it cannot run;
        // it must not take the running download's record away.
        var second: DownloadQueue? = DownloadQueue(
            configuration: .init(download: Self.configuration()), store: store)
        _ = await second!.restore()
        // Its attempt ends at once (tokenInUse) or is held at the gate like the first: either way, not running long.
        var settled = false
        for _ in 0..<3000 where !settled {
            settled =
                await second!.items.allSatisfy { item in
                    if case .running = item.state { return false }
                    return true
                } || gate.heldCount >= 2
            if !settled { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(
            FileManager.default.fileExists(atPath: recordFile),
            "the second queue's restore deleted the record of the first queue's running download")

        // What that costs: the first queue is released (its download pauses), and a later restore finds nothing to
        // continue; the 100,000 bytes on disk are removed as unowned.
        second = nil
        first = nil
        store = nil
        let reopened = try #require(
            await reopenedStore(at: state), "the store is still held after its queues were released")
        let third = DownloadQueue(configuration: .init(download: Self.configuration()), store: reopened)
        #expect(await third.restore().isEmpty)
        let items = await third.items
        #expect(
            items.contains { $0.id == id && $0.bytesOnDisk >= 100_000 },
            "the running download and its 100,000 bytes were lost: \(items.map { "\($0.id) \($0.state) \($0.bytesOnDisk)" }), partial/: \((try? FileManager.default.contentsOfDirectory(atPath: partial)) ?? [])"
        )
        gate.open()
        await third.resumeAll()
        _ = await third.waitUntilIdle()
        expectSameBytes((try? fixture.contents(of: output.appendingPathComponent("held.bin"))), bytes)
    }
}
