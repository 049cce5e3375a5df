import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review of the last hour's changes: the store's `claims` file (58f68bb), re-homing (f53acf1),
/// `copiedIntoPlace` (7fd5b8a) and the release-time discard (1c63efb).
@Suite("The last hour's changes under attack: the queue and its store")
struct LatestHourAttackTests {
    /// Rule broken: no hangs (rule 4); outside data (a store's `claims`) never hangs the process (rule 3).
    ///
    /// Sequence: a store whose `claims` is a FIFO (crafted, or left by a tool; `docs/task-store.md` says a `claims`
    /// that is not a regular file is ignored). A queue on it downloads one 10 kB file.
    ///
    /// Observed: the download never finishes: `TaskStore.recordClaim` opens `claims` with
    /// `O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW` and no `O_NONBLOCK`, and checks nothing about what it opened, so
    /// the finishing download's thread blocks in `open(2)` until some process opens the FIFO for reading: forever.
    /// (Reading it in `claims()` is safe: `O_NONBLOCK` and an `fstat` check.) The test opens the FIFO for reading
    /// after its deadline, so the blocked thread gets free.
    @Test("A store whose claims file is a FIFO does not hang a finishing download")
    func claimsFIFODoesNotHang() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 10_000, seed: 4301)
        let url = fixture.serve(.bytes(bytes), at: "/a.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let state = fixture.directory.url.appendingPathComponent("state")
        let store = try TaskStore(directory: state)
        let claims = state.appendingPathComponent("claims").path
        try #require(mkfifo(claims, 0o600) == 0, "mkfifo: \(String(cString: strerror(errno)))")

        let queue = DownloadQueue(configuration: .init(download: DownloadFixture.configuration()), store: store)
        try await queue.add(url, destination: .directory(output))
        let idle = Atomic<Bool>(false)
        let waiter = Task {
            _ = await queue.waitUntilIdle()
            idle.store(true, ordering: .sequentiallyConsistent)
        }
        let finished = try await waitUntil { idle.load(ordering: .sequentiallyConsistent) }
        #expect(finished, "the download did not finish in time: its thread is blocked opening the FIFO 'claims'")
        if !finished {
            // Free the blocked writer (a reader must stay open until it has written, or it gets SIGPIPE).
            let reader = open(claims, O_RDONLY | O_NONBLOCK)
            _ = try await waitUntil { idle.load(ordering: .sequentiallyConsistent) }
            if reader >= 0 { close(reader) }
        }
        await waiter.value
        try expectSameBytes(fixture.contents(of: output.appendingPathComponent("a.bin")), bytes)
    }

    /// Rule broken: `--overwrite` / `.overwrite` "never replaces a file an earlier run of the same queue saved"
    /// (`docs/task-store.md`, `docs/cli.md`) - a finished file is replaced by another download's bytes (rule 1:
    /// a file reported finished is gone).
    ///
    /// Sequence: a queue on a store, `.overwrite`. Download A (`x.bin`) is added and finishes; the store then holds
    /// no record, so `TaskStore.remove` unlinks `claims`. Download B, to the same `x.bin`, is added to the same
    /// queue and paused mid-transfer (an interruption: SIGINT in the CLI). A new queue restores the store and
    /// resumes B.
    ///
    /// Observed: B replaces A's `x.bin`. Without the interruption the same queue sends B to `x (1).bin` (its claims
    /// in memory remember A): the claim of A was on disk only while the store held a record, and the store was
    /// momentarily empty between A's end and B's `add` although the queue lived on. (The CLI's `get -i` adds a list
    /// 32 entries at a time: a first group that all finished before the next group's records were written loses
    /// its claims the same way.)
    @Test("A file saved before the store was momentarily empty is not replaced by the same queue after a restart")
    func claimsForgottenWhenStoreMomentarilyEmpty() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let pair = try SameNameDownloads(fixture, seeds: (4302, 4303))
        let (first, second, firstURL, secondURL, gate) = (
            pair.first, pair.second, pair.firstURL, pair.secondURL, pair.gate
        )
        let (output, target, state) = (pair.output, pair.target, pair.state)
        let configuration = pair.configuration

        do {
            let store = try TaskStore(directory: state)
            let queue = DownloadQueue(configuration: .init(download: configuration), store: store)
            try await queue.add(firstURL, destination: .directory(output))
            let summary = await queue.waitUntilIdle()
            try #require(summary.finished == 1, "\(summary)")
            try requireSameBytes(fixture.contents(of: target), first)
            let id = try await queue.add(secondURL, destination: .directory(output))
            try #require(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
            try #require(try await waitUntilTemporaryFiles(in: store.partialPath, count: 1, eachHolding: 50_000))
            await queue.pause(id)
            let paused = await queue.waitUntilIdle()
            try #require(paused.waitingForResume == 1, "\(paused)")
        }
        gate.open()
        let summary = try await restartAndFinish(state: state, configuration: configuration)
        #expect(summary.finished == 1, "\(summary)")
        expectKept(
            first, freeNamed: second, in: output,
            "the first download's x.bin was replaced by the second download's bytes")
    }

    /// Rule broken: as above - `.overwrite` replaces a file an earlier run of the same queue saved.
    ///
    /// Sequence: a store whose `claims` ends with a torn entry (`id NUL /pa`: what a crash of the system, or a full
    /// disk making the unchecked `write` short, leaves at its tail; `docs/task-store.md`: "a torn last entry is
    /// ignored"). A queue on it, `.overwrite`: A (`x.bin`) and B (also `x.bin`, held mid-transfer) are added; A
    /// finishes and its claim is appended after the torn bytes; B is paused. A new queue restores and resumes B.
    ///
    /// Observed: B replaces A's `x.bin`. `TaskStore.claims()` splits the file at every NUL and reads pairs from the
    /// start, so the torn entry's path fragment and A's id make one field and every later entry is read shifted by
    /// one field (owner as path, path as owner): none of the claims appended after a torn entry is ever read again.
    @Test("Claims appended after a torn entry are still read back")
    func claimsAfterTornEntry() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let pair = try SameNameDownloads(fixture, seeds: (4304, 4305))
        let (first, second, firstURL, secondURL, gate) = (
            pair.first, pair.second, pair.firstURL, pair.secondURL, pair.gate
        )
        let (output, target, state) = (pair.output, pair.target, pair.state)
        let configuration = pair.configuration

        do {
            let store = try TaskStore(directory: state)
            // The tail an interrupted append left: an owner, its NUL, part of a path.
            let torn = Data((UUID().uuidString.lowercased() + "\u{0}" + output.path + "/ear").utf8)
            try torn.write(to: state.appendingPathComponent("claims"))
            let queue = DownloadQueue(configuration: .init(download: configuration), store: store)
            let idB = try await queue.add(secondURL, destination: .directory(output))
            try #require(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
            try await queue.add(firstURL, destination: .directory(output))
            try #require(try await waitUntil { (try? fixture.contents(of: target)) == first }, "A never finished")
            try #require(try await waitUntilTemporaryFiles(in: store.partialPath, count: 1, eachHolding: 50_000))
            await queue.pause(idB)
            let paused = await queue.waitUntilIdle()
            try #require(paused.waitingForResume == 1, "\(paused)")
            try #require(paused.finished == 1, "\(paused)")
        }
        gate.open()
        let summary = try await restartAndFinish(state: state, configuration: configuration)
        #expect(summary.finished == 1, "\(summary)")
        expectKept(
            first, freeNamed: second, in: output,
            "the first download's x.bin was replaced by the second download's bytes")
    }
}
