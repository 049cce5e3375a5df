import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review (helper 84): a batch whose `--state` is on another file system than its `-o` directory, so a
/// finished file is copied beside its destination (`PartialFile.move(to:replacing:)`, on `EXDEV`), killed at the worst
/// instant of that copy, then continued with `resume --state`.
@Suite("A batch across file systems, killed during the copy into place")
struct CrossDeviceBatchAttackTests {
    /// Whether `/dev/shm` and the temporary directory (where scratch directories go) are different file systems.
    static var shmIsAnotherFileSystem: Bool {
        var shm = stat()
        var temporary = stat()
        return stat("/dev/shm", &shm) == 0 && stat(NSTemporaryDirectory(), &temporary) == 0
            && shm.st_dev != temporary.st_dev
    }

    /// Rule: after a crash, `resume --state` finishes the batch and "a complete batch leaves nothing behind"
    /// (`docs/task-store.md`, claims); rule 2 and `docs/cli.md` ("downloads nothing again that was safely on disk")
    /// ask that what a crash leaves is either continued or cleaned, not kept forever beside the user's files.
    ///
    /// Sequence: `get -i list.txt -o out/ --state /dev/shm/…/state` (tmpfs: another file system), one 300,000-byte
    /// entry. The finished temporary file in `partial/` is copied to `out/.resumable-<UUID>.partial` and flushed;
    /// the run is killed (`RESUMABLE_CRASH_AFTER_STEP_MATCHING`, `_exit(137)` as `kill -9`) right after the flush of
    /// `out/` that follows the copy, before the copy is renamed to `out/a.bin`. Then `resume --state`.
    ///
    /// Observed: `resume --state` exits 0 (`1 finished, 0 failed, 0 left to resume`), `out/a.bin` is right and the store
    /// is empty, but the first run's whole copy stays in `out/` as `.resumable-<UUID>.partial` (300,000 bytes),
    /// which no later run ever removes (`TaskStore.restore()` only cleans its own `partial/`; the copy is named by no
    /// token or record). Every crash during such a copy leaves one more full-size file in the output directory (on
    /// tmpfs: memory). Cause: `PartialFile.copyBeside(_:)` (`Sources/Resumable/FileSystem/PartialFile.swift:372`, the copy at :374)
    /// creates the copy under a fresh random name that nothing records before it is written.
    @Test(
        "A kill during the copy across file systems leaves no stray copy in the output directory once resumed",
        .enabled(if: Self.shmIsAnotherFileSystem, "needs /dev/shm on another file system than the temporary directory"))
    func killDuringCrossDeviceCopyLeavesNoStray() async throws {
        let shm = URL(fileURLWithPath: "/dev/shm", isDirectory: true)
        let scratch = try ScratchDirectory()
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let bytes = Resource.generatedBytes(seed: 8484, range: 0..<300_000)
        server.register(.bytes(bytes), at: "/a.bin")
        try Data((server.url(for: "/a.bin").absoluteString + "\n").utf8).write(to: scratch.file("list.txt"))
        let states = shm.appendingPathComponent("resumable-h84-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: states, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: states) }
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
        // The precondition: the kill came after the copy was written and flushed in `out/`, before any rename there.
        let copy = try #require(
            steps.first { $0.count == 3 && $0[1] == "create" && $0[2].hasPrefix(out.path + "/.resumable-") },
            "no copy was made in out/: \(steps)")[2]
        try #require(steps.contains { $0.count == 3 && $0[1] == "flush" && $0[2] == copy }, "\(steps)")
        try #require(!steps.contains { $0.count == 3 && $0[1] == "rename" }, "\(steps)")

        let resumed = try await CLIProcess.run(["resume", "--state", state, "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        try expectSameBytes(Data(contentsOf: out.appendingPathComponent("a.bin")), Data(bytes))
        let left = TodayFixesCLIAttackTests.records(in: URL(fileURLWithPath: state))
        #expect(left.isEmpty, "records left: \(left)")
        let files = (try? FileManager.default.contentsOfDirectory(atPath: out.path)) ?? []
        #expect(
            files == ["a.bin"],
            "the batch is complete, yet the output directory holds \(files.sorted()): the copy the killed run made stays"
        )
    }
}
