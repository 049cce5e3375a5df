import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review (helper 86): two processes finishing downloads whose temporary files share a name, across
/// file systems, clash on the copy beside the destination (`PartialFile.copyBeside(_:)`, f6b9736).
@Suite("Two stores finishing across file systems clash on the copy's name")
struct CopyBesideClashAttackTests {
    /// Rule 1 (a finished file is exactly the server's bytes, or there is no finished file). `docs/cli.md`: "A state
    /// directory may be moved, or restored from a backup elsewhere". A restored copy of a store is another store (its
    /// own lock, its own `partial/`), so nothing stops it from running beside the original, and its temporary files
    /// have the original's names, so their copies beside the destination too.
    ///
    /// Helper 86 ran two such stores (one stopped with SIGSTOP between its copy's create and rename, the other killed
    /// right after its own create under the same name): the second removed the first's copy by name, and the first
    /// renamed the second's empty file into place and exited 0 with a 0-byte `out/a.bin`. That interleaving depends on
    /// catching a process between two steps; this test makes it deterministic. A batch is killed right after its copy
    /// `out/.resumable-X.partial` was flushed; the test then holds that copy the way a copy being written is held (its
    /// lock), as the other store's finish would, and runs `resume --state`: it must leave the held copy alone, finish
    /// nothing, and keep its download (exit 75). Once the lock is released, `resume --state` finishes the exact file.
    @Test(
        "A copy another finish holds is never removed from under it; released, the exact file is finished",
        .enabled(if: CrossDeviceBatchAttackTests.shmIsAnotherFileSystem, "needs /dev/shm on another file system"))
    func heldCopyIsLeftAlone() async throws {
        let length: Int64 = 4 << 20
        let scratch = try ScratchDirectory()
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.generated(length: length, seed: 8689), at: "/a.bin")
        try Data((server.url(for: "/a.bin").absoluteString + "\n").utf8).write(to: scratch.file("list.txt"))
        let states = URL(fileURLWithPath: "/dev/shm/resumable-h86-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: states, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: states) }
        let state = states.appendingPathComponent("state").path
        let out = scratch.url.appendingPathComponent("out")
        let destination = out.appendingPathComponent("a.bin").path

        // 1. The first run, killed with its copy made and flushed in out/, before the rename.
        let killed = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "out/", "--state", state, "-q"], in: scratch.url,
            environment: ["RESUMABLE_CRASH_AFTER_STEP_MATCHING": "flush-directory " + out.path])
        try #require(killed.exitCode == 137, "\(killed)")
        let leftover = try #require(
            ((try? FileManager.default.contentsOfDirectory(atPath: out.path)) ?? []).first {
                $0.hasPrefix(".resumable-")
            })
        let copyPath = out.appendingPathComponent(leftover).path

        // 2. The copy held as its writer holds it.
        let held = open(copyPath, O_RDWR | O_CLOEXEC)
        try #require(held >= 0)
        try #require(flock(held, LOCK_EX | LOCK_NB) == 0)
        var before = stat()
        try #require(fstat(held, &before) == 0)
        let refused = try await CLIProcess.run(["resume", "--state", state, "-q"], in: scratch.url)
        #expect(refused.exitCode == 75, "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: destination), "a file was finished beside a held copy")
        var after = stat()
        #expect(lstat(copyPath, &after) == 0 && after.st_ino == before.st_ino, "the held copy was removed or replaced")

        // 3. Released: the next resume removes it and finishes the exact file.
        flock(held, LOCK_UN)
        close(held)
        let resumed = try await CLIProcess.run(["resume", "--state", state, "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        #expect(
            try Data(contentsOf: URL(fileURLWithPath: destination))
                == Data(Resource.generatedBytes(seed: 8689, range: 0..<length)))
        #expect((try? FileManager.default.contentsOfDirectory(atPath: out.path)) == ["a.bin"])
    }
}
