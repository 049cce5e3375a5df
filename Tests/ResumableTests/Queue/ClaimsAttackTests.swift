import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review of the store's `claims` file (58f68bb, a48e01a, 9338091) and of the claims a failed move gives
/// back (f53acf1): what the queue remembers of the names its finished files took, across restarts.
@Suite("Claims under attack: the queue and its store")
struct ClaimsAttackTests {
    /// Waits until the queue lists `id` as failed.
    private static func waitUntilFailed(_ id: DownloadQueue.TaskID, in queue: DownloadQueue) async throws -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + Waiting.deadline
        while clock.now < deadline {
            if let item = await queue.items.first(where: { $0.id == id }), case .failed = item.state { return true }
            try await Task.sleep(for: .milliseconds(10))
        }
        return false
    }

    /// Rule broken: "a queue never replaces a file that it (or an earlier run of it on the same store) saved"
    /// (`.overwrite`, `docs/cli.md`, `docs/task-store.md`); rule 1: nothing the batch saved is replaced or lost.
    ///
    /// Sequence: a queue on a store, `.overwrite`, two downloads whose files are both named `x.bin` (two servers'
    /// `x.bin`). `out/x.bin` is a directory for a moment. A finishes first: it claims `out/x.bin` (appended to
    /// `claims` as `A out/x.bin`) and its rename fails (`EISDIR`); A fails with its token (it stays in the store,
    /// `failed`) and, since f53acf1, gives its claim back in memory. The directory goes away (the user removes it).
    /// B finishes: `out/x.bin` is free, B claims it (appended: `B out/x.bin`) and saves its file there. The
    /// queue is released (the batch ends, or SIGINT). A new queue restores the store and resumes A.
    ///
    /// Observed: A replaces B's `out/x.bin`; B's file is gone (and no file of B is anywhere). In the first queue,
    /// resuming A instead sends it to `x (1).bin` (B holds the claim in memory). `FinalPathClaims.restore` keeps the
    /// first claim of a path found in `claims` ("keeping any made since" / `where claimed[...] == nil`), but the
    /// file is in a path's *last* claim: A's was given back (`release` only forgets it in memory; "A store keeps the
    /// claim on disk: after a restart the name stays owner's, which is only cautious"): it is not only cautious,
    /// it hands the name back to the download that does not own the file there.
    @Test("A claim given back after a failed move does not let its download replace the file saved there since")
    func releasedClaimWinsAfterRestart() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let first = testBytes(count: 20_000, seed: 4401)
        let second = testBytes(count: 200_000, seed: 4402)
        let firstURL = fixture.serve(.bytes(first), at: "/a/x.bin")
        let gate = fixture.serveHeld(.bytes(second), after: 50_000, at: "/b/x.bin")
        let secondURL = fixture.server.url(for: "/b/x.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        let target = output.appendingPathComponent("x.bin")
        // Something in the way for a moment: A's rename over it fails.
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        let state = fixture.directory.url.appendingPathComponent("state")
        var configuration = DownloadFixture.configuration(existingFile: .overwrite)
        configuration.connections = .single

        do {
            let store = try TaskStore(directory: state)
            let queue = DownloadQueue(configuration: .init(download: configuration), store: store)
            try await queue.add(secondURL, destination: .directory(output))
            try #require(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
            let idA = try await queue.add(firstURL, destination: .directory(output))
            try #require(try await Self.waitUntilFailed(idA, in: queue), "A's move into a directory did not fail")
            try FileManager.default.removeItem(at: target)
            gate.open()
            try #require(try await waitUntil { (try? fixture.contents(of: target)) == second }, "B never finished")
            let summary = await queue.waitUntilIdle()
            try #require(summary.finished == 1 && summary.waitingForResume == 1, "\(summary)")
        }
        let summary = try await restartAndFinish(state: state, configuration: configuration)
        #expect(summary.finished == 1, "\(summary)")
        expectKept(
            second, freeNamed: first, in: output,
            "B's x.bin, saved by this batch, was replaced by A's bytes after the restart")
    }

    /// Rule broken: "A complete batch leaves nothing in the state directory but the empty store layout (no
    /// `claims`)" (`docs/task-store.md`: `claims` "is removed when a queue is released and no record is left"); and,
    /// through the leftover, `.overwrite` of a later batch on the same store stops replacing a file that was there
    /// before it, but only when that batch is interrupted.
    ///
    /// Sequence: a queue on a store, `.overwrite`, one download A (`x.bin`). A's file is in place and its record not
    /// yet removed (`Hooks.beforeFinishedRecordRemoved` holds A's thread there) when the queue is released: its
    /// `deinit` finds A's record in `tasks/` and keeps `claims`. A then removes its record. Nothing is left to do:
    /// `tasks/` is empty, `out/x.bin` is A's file, and no queue is open.
    ///
    /// Observed: `claims` stays in the state directory, naming `out/x.bin`. A later, new batch on the store (no
    /// `restore`: what `get -i` does) adds C, also `x.bin`, with `.overwrite` (the user wants the file from before
    /// replaced); C is interrupted (paused), and the continued batch (`restore`, what `resume --state` does) reads
    /// the old batch's claim and saves C as `x (1).bin`: `x.bin` is not replaced. Uninterrupted, the same batch
    /// replaces it. `removeClaimsIfNothingIsLeft` runs only in the queue's `deinit`, and a download released with the
    /// queue goes on to remove its record after it.
    @Test("A queue released while its last download is between the move and the record's removal leaves no claims")
    func claimsLeftWhenReleasedDuringFinish() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let old = testBytes(count: 20_000, seed: 4403)
        let new = testBytes(count: 200_000, seed: 4404)
        let oldURL = fixture.serve(.bytes(old), at: "/a/x.bin")
        let gate = fixture.serveHeld(.bytes(new), after: 50_000, at: "/c/x.bin")
        let newURL = fixture.server.url(for: "/c/x.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let target = output.appendingPathComponent("x.bin")
        let state = fixture.directory.url.appendingPathComponent("state")
        let claimsFile = state.appendingPathComponent("claims").path
        var configuration = DownloadFixture.configuration(existingFile: .overwrite)
        configuration.connections = .single
        configuration.checkpointing = .init(interval: .milliseconds(50)) { _ in }

        let entered = Atomic<Bool>(false)
        let proceed = DispatchSemaphore(value: 0)
        var hooks = DownloadQueue.Hooks()
        hooks.beforeFinishedRecordRemoved = { _ in
            entered.store(true, ordering: .sequentiallyConsistent)
            proceed.wait()
        }
        var store: TaskStore? = try TaskStore(directory: state)
        var queue: DownloadQueue? = DownloadQueue(
            configuration: .init(download: configuration), store: store, hooks: hooks)
        try await queue!.add(oldURL, destination: .directory(output))
        try #require(try await waitUntil { entered.load(ordering: .sequentiallyConsistent) }, "A never finished")
        queue = nil
        store = nil
        proceed.signal()
        let tasks = state.appendingPathComponent("tasks").path
        let empty = try await waitUntil {
            ((try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? ["?"]).isEmpty
        }
        try #require(empty, "A's record was never removed")
        try requireSameBytes(fixture.contents(of: target), old)
        // The store is free again once A's task let it go.
        var reopened = try await reopenedStore(at: state)
        try #require(reopened != nil)
        #expect(
            !FileManager.default.fileExists(atPath: claimsFile),
            "every download is finished and no record is left, yet the state directory keeps 'claims'")

        // A new batch on the same store (get -i: no restore), interrupted, then continued (resume --state).
        do {
            let queue = DownloadQueue(configuration: .init(download: configuration), store: reopened!)
            reopened = nil
            let id = try await queue.add(newURL, destination: .directory(output))
            try #require(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
            let store = state.appendingPathComponent("partial").path
            try #require(try await waitUntilTemporaryFiles(in: store, count: 1, eachHolding: 50_000))
            await queue.pause(id)
            let paused = await queue.waitUntilIdle()
            try #require(paused.waitingForResume == 1, "\(paused)")
        }
        gate.open()
        let continued = DownloadQueue(
            configuration: .init(download: configuration), store: try TaskStore(directory: state))
        #expect(await continued.restore().isEmpty)
        await continued.resumeAll()
        let summary = await continued.waitUntilIdle()
        #expect(summary.finished == 1, "\(summary)")
        let names = sortedNames(in: output)
        #expect(
            (try? fixture.contents(of: target)) == new,
            "--overwrite did not replace x.bin, a file from before this batch (an earlier, complete batch's): \(names)"
        )
    }

    /// Rule broken: rule 3 (outside data never hangs or exhausts the process) and rule 4 (no hangs).
    ///
    /// Sequence: a store whose `claims` is a 64 MiB file of NUL bytes (the largest `claims()` reads:
    /// `maximumClaimsSize`); a crafted or damaged file, or a disk block of zeroes after a crash. A queue restores it.
    ///
    /// Observed: `TaskStore.claims()` splits the whole file at every NUL into an array of 67 million slices and then
    /// 67 million optional strings, each then checked with `UUID(uuidString:)`: gigabytes of memory and many
    /// seconds before `restore()` returns (measured below against a generous bound of 10 s; a few kilobytes of
    /// claims take microseconds). The size limit bounds the bytes read, not the work done on them. Measured on a
    /// 2-core machine: 34-36 s and a peak resident size of 3.2 GB (`/usr/bin/time -v`) for this one restore.
    ///
    /// Fixed by reading at most the first `maximumClaimsSize` bytes in one pass, without a copy per field. No time is
    /// asserted here (speed is measured by benchmarks); the store's reader is called directly (a queue starting on a
    /// store without records removes `claims` first), and what it must find in such a file is checked.
    @Test("A claims file of 64 MiB of NUL bytes: the reader goes through the NULs and stops at its limit")
    func nulClaimsFileIsCheap() async throws {
        let directory = try TemporaryDirectory()
        let state = directory.url.appendingPathComponent("state")
        let store = try TaskStore(directory: state)
        let owner = UUID().uuidString.lowercased()
        var bytes = Data(count: TaskStore.maximumClaimsSize / 2)
        bytes.append(Data("\0\(owner)\0/out/inside\0".utf8))
        bytes.append(Data(count: 64 << 20))
        bytes.append(Data("\0\(owner)\0/out/beyond\0".utf8))
        try bytes.write(to: state.appendingPathComponent("claims"))
        let claims = store.claims()
        #expect(claims.map(\.path) == ["/out/inside"])
        #expect(claims.map(\.owner) == [owner])
    }

    /// Rule broken: rule 1 (nothing the batch saved is replaced), after a restart.
    ///
    /// Sequence: a store whose `claims` is just under 64 MiB (`maximumClaimsSize`), all of it well-formed claims on
    /// other paths (a long batch's names). A queue, `.overwrite`: A (`x.bin`) finishes, and its claim is appended,
    /// since `recordClaim` writes to a file of at most 64 MiB; the file is now a few bytes over. B (`x.bin` too) is
    /// paused mid-transfer. A new queue restores the store and resumes B.
    ///
    /// Observed: B replaces A's `x.bin`. `claims()` ignores a file over the limit altogether, so the last append,
    /// which the writer allowed, costs every claim in the file, not only its own (`docs/task-store.md`: "a file over
    /// 64 MiB ... is ignored and never written to"; it was written to, and then became over).
    @Test("The claim that takes claims over 64 MiB does not cost every claim in it")
    func lastClaimOverTheLimitLosesAll() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let pair = try SameNameDownloads(fixture, seeds: (4405, 4406))
        let (first, second, firstURL, secondURL, gate) = (
            pair.first, pair.second, pair.firstURL, pair.secondURL, pair.gate
        )
        let (output, target, state) = (pair.output, pair.target, pair.state)
        let configuration = pair.configuration

        // Well-formed claims on other names, up to a few bytes under the limit.
        let owner = UUID().uuidString.lowercased()
        let entry = Array("\0\(owner)\0\(output.path)/elsewhere-000000000.bin\0".utf8)
        var padding = [UInt8]()
        padding.reserveCapacity(TaskStore.maximumClaimsSize)
        while padding.count + entry.count <= TaskStore.maximumClaimsSize - 8 { padding += entry }
        try Data(padding).write(to: fixture.directory.url.appendingPathComponent("claims-padding"))

        do {
            let store = try TaskStore(directory: state)
            try FileManager.default.moveItem(
                at: fixture.directory.url.appendingPathComponent("claims-padding"),
                to: state.appendingPathComponent("claims"))
            let queue = DownloadQueue(configuration: .init(download: configuration), store: store)
            let idB = try await queue.add(secondURL, destination: .directory(output))
            try #require(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
            try await queue.add(firstURL, destination: .directory(output))
            try #require(try await waitUntil { (try? fixture.contents(of: target)) == first }, "A never finished")
            try #require(try await waitUntilTemporaryFiles(in: store.partialPath, count: 1, eachHolding: 50_000))
            await queue.pause(idB)
            let paused = await queue.waitUntilIdle()
            try #require(paused.waitingForResume == 1 && paused.finished == 1, "\(paused)")
        }
        gate.open()
        let summary = try await restartAndFinish(state: state, configuration: configuration)
        #expect(summary.finished == 1, "\(summary)")
        expectKept(first, freeNamed: second, in: output, "A's x.bin was replaced by B's bytes after the restart")
    }

    /// Rule broken: rule 4 (no giving up wrongly: "a download that can never finish because of a stale claim").
    ///
    /// Sequence: a queue on a store, `.fail` (the library's policy that never replaces). `out/p.bin` is someone
    /// else's file: download A to `out/p.bin` claims the name (appended to `claims`), its move fails with
    /// `destinationExists`, it gives the claim back in memory, and the user cancels A (its record and bytes go).
    /// Another download C of the store is paused, so the store is not empty and `claims` stays. The queue is
    /// released. The user removes `out/p.bin` and, in a new queue on the store (`restore()`), adds B to `out/p.bin`.
    ///
    /// Observed: B fails with "'…/p.bin' is another download's of the same queue": nothing of the queue is at that
    /// path (nothing is), A is gone for good, yet its claim read back from `claims` blocks the name for every other
    /// download as long as the store holds a record. In the first queue, the same B finishes (the claim was given
    /// back). `FinalPathClaims.release` forgets a claim only in memory, and a cancelled download's claims are never
    /// given back at all.
    @Test("A cancelled download's claim on a name it never took does not fail a later download after a restart")
    func staleClaimFailsLaterDownload() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let bytesA = testBytes(count: 20_000, seed: 4407)
        let bytesB = testBytes(count: 20_000, seed: 4408)
        let bytesC = testBytes(count: 200_000, seed: 4409)
        let urlA = fixture.serve(.bytes(bytesA), at: "/a/p.bin")
        let urlB = fixture.serve(.bytes(bytesB), at: "/b/p.bin")
        let gate = fixture.serveHeld(.bytes(bytesC), after: 50_000, at: "/c/c.bin")
        let urlC = fixture.server.url(for: "/c/c.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let target = output.appendingPathComponent("p.bin")
        try Data("someone else's\n".utf8).write(to: target)
        let state = fixture.directory.url.appendingPathComponent("state")
        var configuration = DownloadFixture.configuration(existingFile: .fail)
        configuration.connections = .single
        configuration.checkpointing = .init(interval: .milliseconds(50)) { _ in }

        do {
            let store = try TaskStore(directory: state)
            let queue = DownloadQueue(configuration: .init(download: configuration), store: store)
            let idC = try await queue.add(urlC, destination: .directory(output))
            try #require(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
            try #require(try await waitUntilTemporaryFiles(in: store.partialPath, count: 1, eachHolding: 50_000))
            await queue.pause(idC)
            let idA = try await queue.add(urlA, destination: .file(target))
            let summary = await queue.waitUntilIdle()
            try #require(summary.failed == 1 && summary.waitingForResume == 2, "\(summary)")
            try #require(await queue.items.contains { $0.id == idA })
            await queue.cancel(idA)
            let after = await queue.waitUntilIdle()
            try #require(after.cancelled == 1 && after.waitingForResume == 1, "\(after)")
        }
        gate.open()
        try FileManager.default.removeItem(at: target)
        let store = try TaskStore(directory: state)
        let queue = DownloadQueue(configuration: .init(download: configuration), store: store)
        #expect(await queue.restore().isEmpty)
        let idB = try await queue.add(urlB, destination: .file(target))
        let summary = await queue.waitUntilIdle()
        let failure = await queue.items.first { $0.id == idB }.map { "\($0.state)" } ?? "none"
        #expect(summary.finished == 1 && summary.failed == 0, "\(summary); B: \(failure)")
        expectSameBytes((try? fixture.contents(of: target)), bytesB, "B: \(failure)")
    }
}
