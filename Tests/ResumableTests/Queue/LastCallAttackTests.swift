import Foundation
import LoopbackServer
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review of 60b0b40: claims only for `.overwrite`, and the cached directory resolutions of
/// `FinalPathClaims.resolve` and `TaskStore.holds`.
@Suite("Last call under attack: claims only for an overwrite, cached resolutions")
struct LastCallAttackTests {
    /// Rule broken: rule 2, "nothing the queue saved is replaced"; `.overwrite`'s own promise: "a name another
    /// download of the same queue saved a file under (also in an earlier run on the same ``TaskStore``) gets a free
    /// name instead", and `docs/cli.md`: "`--overwrite` replaces files that were there before; never one this batch
    /// saved, also before an interruption".
    ///
    /// Sequence: a batch on a store with the default `.chooseFreeName` (`resumable get -i list -o out --state s`):
    /// A (`/a/x.bin`) finishes into `out/x.bin`; B (`/b/x.bin`, also `x.bin`) is paused (the batch is interrupted,
    /// ^C). The batch is continued with `--overwrite` (`resume --state s --overwrite`): a new queue on the store,
    /// `.overwrite`, `restore()`, `resumeAll()`.
    ///
    /// Observed: B replaces `out/x.bin`; A's file, saved by this batch before the interruption, is gone. Since
    /// 60b0b40 a `.chooseFreeName` download claims nothing (`Finisher.moveIntoPlace`: `existingFile == .overwrite ?
    /// self.claims : nil`), so the store's `claims` never learns A's name and the continued overwrite finds it free.
    @Test("An overwrite continuing a batch does not replace a file the batch saved before under another policy")
    func overwriteAfterFreeNameRunReplacesBatchFile() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let first = testBytes(count: 20_000, seed: 4701)
        let second = testBytes(count: 30_000, seed: 4702)
        let firstURL = fixture.serve(.bytes(first), at: "/a/x.bin")
        let secondURL = fixture.serve(.bytes(second), at: "/b/x.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let target = output.appendingPathComponent("x.bin")
        let state = fixture.directory.url.appendingPathComponent("state")

        do {
            var configuration = DownloadFixture.configuration(existingFile: .chooseFreeName)
            configuration.connections = .single
            let store = try TaskStore(directory: state)
            let queue = DownloadQueue(configuration: .init(download: configuration), store: store)
            try await queue.add(firstURL, destination: .directory(output))
            try await queue.add(secondURL, destination: .directory(output), paused: true)
            let summary = await queue.waitUntilIdle()
            try #require(summary.finished == 1, "\(summary)")
            try requireSameBytes((try? fixture.contents(of: target)), first)
        }
        var configuration = DownloadFixture.configuration(existingFile: .overwrite)
        configuration.connections = .single
        let summary = try await restartAndFinish(state: state, configuration: configuration)
        #expect(summary.finished == 1, "\(summary)")
        expectKept(
            first, freeNamed: second, in: output, "A's x.bin, saved by this batch before the interruption, was replaced"
        )
    }

    /// Rule broken: rule 2, "nothing the queue saved is replaced" (`.overwrite`: "a name another download of the
    /// same queue saved a file under gets a free name instead"; `FinalPathClaims`: "`out/x.bin` and
    /// `link-to-out/x.bin` are one file").
    ///
    /// Sequence: a queue, `.overwrite`, output `out/`. Z (`z.bin`) finishes into `out/`: `FinalPathClaims.resolve`
    /// caches `out` → `…/out` with `out`'s device and inode. The user moves the output directory and leaves a link
    /// in its place (`mv out real; ln -s real out`: the directory keeps its inode). A (`/a/x.bin`) is added to `out/`
    /// and finishes: its file is `real/x.bin`. B (`/b/x.bin`) is added to `real/` and finishes.
    ///
    /// Observed: B replaces A's `real/x.bin`. A's claim was filed under the cached `…/out/x.bin` (both `stat`s
    /// — of `out` as given and of the cached resolution `…/out`, now a link — give the moved directory's inode),
    /// while B's fresh `realpath` files it under `…/real/x.bin`: two keys for one file. Without the cache (9fc683d)
    /// both resolve to `…/real/x.bin` and B takes `x (1).bin`. The cache checks that the cached resolution leads to
    /// the same directory, not that it is still a resolution (free of links).
    @Test("A directory moved and replaced by a link to it does not let an overwrite replace a file of the queue")
    func movedDirectoryLeavesStaleClaimKey() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let warm = testBytes(count: 5_000, seed: 4703)
        let first = testBytes(count: 20_000, seed: 4704)
        let second = testBytes(count: 30_000, seed: 4705)
        let warmURL = fixture.serve(.bytes(warm), at: "/z/z.bin")
        let firstURL = fixture.serve(.bytes(first), at: "/a/x.bin")
        let secondURL = fixture.serve(.bytes(second), at: "/b/x.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        let real = fixture.directory.url.appendingPathComponent("real")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        var configuration = DownloadFixture.configuration(existingFile: .overwrite)
        configuration.connections = .single
        let queue = DownloadQueue(configuration: .init(maximumConcurrentDownloads: 1, download: configuration))

        try await queue.add(warmURL, destination: .directory(output))
        var summary = await queue.waitUntilIdle()
        try #require(summary.finished == 1, "\(summary)")
        try #require(rename(output.path, real.path) == 0, "rename: \(errno)")
        try #require(symlink(real.path, output.path) == 0, "symlink: \(errno)")

        try await queue.add(firstURL, destination: .directory(output))
        summary = await queue.waitUntilIdle()
        try #require(summary.finished == 2, "\(summary)")
        try requireSameBytes((try? fixture.contents(of: real.appendingPathComponent("x.bin"))), first)

        try await queue.add(secondURL, destination: .directory(real))
        summary = await queue.waitUntilIdle()
        #expect(summary.finished == 3, "\(summary)")
        let names = (try? FileManager.default.contentsOfDirectory(atPath: real.path))?.sorted() ?? []
        #expect(
            (try? fixture.contents(of: real.appendingPathComponent("x.bin"))) == first,
            "A's x.bin, saved by this queue, was replaced by B's; the directory holds \(names)")
        expectSameBytes((try? fixture.contents(of: real.appendingPathComponent("x (1).bin"))), second, "\(names)")
    }
}
