import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review (helper 86) of `PartialFile.copyBeside(_:)` after f6b9736: the copy beside the destination now
/// takes the temporary file's own name, so that "the next finish of the same download" removes what a crash left.
/// These tests take the paths on which that next finish never comes, or comes by another route.
@Suite("The copy across file systems after a crash: when no later finish of the same name removes it")
struct CopyBesideLeftoverAttackTests {
    /// Runs `get -i list.txt -o out/ --state <tmpfs>/state` for one entry and kills it right after the flush of `out/`
    /// that follows the copy (as `CrossDeviceBatchAttackTests` does). Returns the state path and the copy's path.
    static func crashDuringCopy(
        scratch: ScratchDirectory, server: LoopbackServer, states: URL
    ) async throws -> (state: String, out: URL, copy: String) {
        try Data((server.url(for: "/a.bin").absoluteString + "\n").utf8).write(to: scratch.file("list.txt"))
        let state = states.appendingPathComponent("state").path
        let out = scratch.url.appendingPathComponent("out")
        let log = scratch.file("steps.log")
        let crashed = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "out/", "--state", state, "-q"], in: scratch.url,
            environment: [
                "RESUMABLE_STEP_LOG": log.path,
                "RESUMABLE_CRASH_AFTER_STEP_MATCHING": "flush-directory " + out.path,
            ])
        try #require(crashed.exitCode == 137, "\(crashed)")
        let steps = try String(contentsOf: log, encoding: .utf8).split(separator: "\n").map {
            $0.split(separator: " ", maxSplits: 2).map(String.init)
        }
        let copy = try #require(
            steps.first { $0.count == 3 && $0[1] == "create" && $0[2].hasPrefix(out.path + "/.resumable-") },
            "no copy was made in out/: \(steps)")[2]
        try #require(!steps.contains { $0.count == 3 && $0[1] == "rename" }, "\(steps)")
        try #require(FileManager.default.fileExists(atPath: copy))
        return (state, out, copy)
    }

    /// Rule 2 / `docs/cli.md` (batches): "a crash during that copy leaves it there, and the `resume --state` that
    /// finishes the download replaces it", and "A state directory may be moved, or restored from a backup elsewhere:
    /// its records still find their bytes in its own `partial/`". The docs' own advice is "Keep it on the output's
    /// file system".
    ///
    /// Sequence: a batch with `--state` on `/dev/shm` (tmpfs) and `-o out/` on disk, one 300,000-byte entry, killed
    /// right after the copy `out/.resumable-<UUID>.partial` was written and flushed. The user follows the advice and
    /// moves the state directory next to `out/` (`mv`, same disk), then `resume --state moved`.
    ///
    /// Observed: exit 0, `out/a.bin` right, store empty, and the killed run's full-size copy stays in `out/` for good:
    /// the finish is now a plain rename, which never looks for a copy of that name.
    @Test(
        "A crash during the copy, then the state moved onto the output's file system: the copy is not left behind",
        .enabled(if: CrossDeviceBatchAttackTests.shmIsAnotherFileSystem, "needs /dev/shm on another file system"))
    func stateMovedAfterCrashLeavesNoCopy() async throws {
        let scratch = try ScratchDirectory()
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let bytes = Resource.generatedBytes(seed: 8686, range: 0..<300_000)
        server.register(.bytes(bytes), at: "/a.bin")
        let states = URL(fileURLWithPath: "/dev/shm/resumable-h86-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: states, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: states) }
        let (state, out, copy) = try await Self.crashDuringCopy(scratch: scratch, server: server, states: states)

        let moved = scratch.url.appendingPathComponent("moved-state")
        let mv = Process()
        mv.executableURL = URL(fileURLWithPath: "/bin/mv")
        mv.arguments = [state, moved.path]
        try mv.run()
        mv.waitUntilExit()
        try #require(mv.terminationStatus == 0)

        let resumed = try await CLIProcess.run(["resume", "--state", moved.path, "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        try expectSameBytes(Data(contentsOf: out.appendingPathComponent("a.bin")), Data(bytes))
        #expect(TodayFixesCLIAttackTests.records(in: moved).isEmpty)
        let files = (try? FileManager.default.contentsOfDirectory(atPath: out.path)) ?? []
        #expect(
            files == ["a.bin"],
            "the batch is complete, yet out/ holds \(files.sorted()) (the killed run's copy \(copy) stays for good)")
    }

    /// Same crash; then the file changes on the server before `resume --state` (new bytes, new ETag), so the
    /// download starts again into a new temporary file (`DownloadEngine.switchFile`, a new `.resumable-<UUID>`): its
    /// finish copies under the new name and never meets the killed run's copy of the old version (300,000 bytes),
    /// which stays in `out/` for good though the batch is complete (exit 0).
    @Test(
        "A crash during the copy, then the file changed on the server: the old copy is not left behind",
        .enabled(if: CrossDeviceBatchAttackTests.shmIsAnotherFileSystem, "needs /dev/shm on another file system"))
    func changedFileAfterCrashLeavesNoCopy() async throws {
        let scratch = try ScratchDirectory()
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes(Resource.generatedBytes(seed: 8686, range: 0..<300_000)), at: "/a.bin")
        let states = URL(fileURLWithPath: "/dev/shm/resumable-h86-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: states, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: states) }
        let (state, out, copy) = try await Self.crashDuringCopy(scratch: scratch, server: server, states: states)

        let newer = Resource.generatedBytes(seed: 8687, range: 0..<310_000)
        server.register(.bytes(newer), at: "/a.bin")
        let resumed = try await CLIProcess.run(["resume", "--state", state, "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        let saved = try Data(contentsOf: out.appendingPathComponent("a.bin"))
        expectSameBytes(saved, Data(newer), "the new version is the one saved (the download started again)")
        let files = (try? FileManager.default.contentsOfDirectory(atPath: out.path)) ?? []
        #expect(
            files == ["a.bin"],
            "the batch is complete, yet out/ holds \(files.sorted()) (the killed run's copy \(copy))")
    }
}
