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
    /// directory may be moved, or restored from a backup elsewhere: its records still find their bytes in its own
    /// `partial/`". A restored copy of a store is another store (its own lock, its own `partial/`), so nothing stops
    /// it from running beside the original, and its temporary files have the original's names.
    ///
    /// Sequence: a batch (`--state` on `/dev/shm`, `-o out/` on disk, one 64 MiB entry) is killed right after its copy
    /// `out/.resumable-X.partial` was flushed (as `CrossDeviceBatchAttackTests`). The store is copied (`cp -a state
    /// backup`). `resume --state state` (A) starts its finish: it removes the leftover and makes its copy anew; A is
    /// stopped (SIGSTOP) once its log shows that create and before any rename (checked on disk: no `out/a.bin`).
    /// `resume --state backup` (B) then reaches the same finish: the name is taken, so B unlinks A's copy and makes its
    /// own under the same name; B is killed right after that create (`RESUMABLE_CRASH_AFTER_STEP_MATCHING`). A goes
    /// on (SIGCONT): it writes and flushes its copy, which has no name any more, then renames the path, which now
    /// holds B's empty file, to `out/a.bin`.
    ///
    /// Observed: A exits 0 ("finished"), its record is gone, and `out/a.bin` is 0 bytes, not the server's 64 MiB.
    /// Cause: `copyBeside` (`Sources/Resumable/FileSystem/PartialFile.swift:393`) unlinks whatever holds the name
    /// without checking that no one is using it (it is not locked before the unlink), and `move(to:replacing:)`
    /// (:324) renames the copy by path without checking that the path still names the file it wrote through its
    /// descriptor (as it does for the temporary file itself, :309). The stop of A is not a timed guess: the test
    /// checks, with A stopped, that A has made its copy and renamed nothing (no `rename` step, no `out/a.bin`).
    @Test(
        "A second store's finish under the same copy name never turns the first's finished file into another file",
        .enabled(if: CrossDeviceBatchAttackTests.shmIsAnotherFileSystem, "needs /dev/shm on another file system"))
    func clashingCopiesNeverFinishAShortFile() async throws {
        let length: Int64 = 64 << 20
        let scratch = try ScratchDirectory()
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.generated(length: length, seed: 8689), at: "/a.bin")
        try Data((server.url(for: "/a.bin").absoluteString + "\n").utf8).write(to: scratch.file("list.txt"))
        let states = URL(fileURLWithPath: "/dev/shm/resumable-h86-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: states, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: states) }
        let state = states.appendingPathComponent("state").path
        let backup = states.appendingPathComponent("backup").path
        let out = scratch.url.appendingPathComponent("out")
        let destination = out.appendingPathComponent("a.bin").path

        // 1. The first run, killed with its copy made and flushed in out/, before the rename.
        let killed = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "out/", "--state", state, "-q"], in: scratch.url,
            environment: [
                "RESUMABLE_STEP_LOG": scratch.file("steps0.log").path,
                "RESUMABLE_CRASH_AFTER_STEP_MATCHING": "flush-directory " + out.path,
            ])
        try #require(killed.exitCode == 137, "\(killed)")
        let leftover = try #require(
            ((try? FileManager.default.contentsOfDirectory(atPath: out.path)) ?? []).first {
                $0.hasPrefix(".resumable-")
            })
        let copyPath = out.appendingPathComponent(leftover).path

        // 2. A restored copy of the store.
        let cp = Process()
        cp.executableURL = URL(fileURLWithPath: "/bin/cp")
        cp.arguments = ["-a", state, backup]
        try cp.run()
        cp.waitUntilExit()
        try #require(cp.terminationStatus == 0)

        // 3. A: resume --state state, stopped between the create of its copy and any rename.
        let logA = scratch.file("stepsA.log")
        let a = try await CLIProcess.start(
            ["resume", "--state", state, "-q"], in: scratch.url, environment: ["RESUMABLE_STEP_LOG": logA.path])
        let createLine = " create " + copyPath
        var stopped = false
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(60)
        while clock.now < deadline, a.isRunning {
            if let text = try? String(contentsOf: logA, encoding: .utf8), text.contains(createLine) {
                a.send(SIGSTOP)
                stopped = true
                break
            }
            try await Task.sleep(for: .microseconds(200))
        }
        try #require(
            stopped, "A never made its copy: \(String(describing: try? String(contentsOf: logA, encoding: .utf8)))")
        defer { a.send(SIGCONT) }
        // Wait until A is really stopped (state T in /proc), then check it has not renamed anything yet.
        while clock.now < deadline {
            let status = (try? String(contentsOfFile: "/proc/\(a.pid)/stat", encoding: .utf8)) ?? ""
            if let close = status.lastIndex(of: ")"), status[status.index(close, offsetBy: 2)] == "T" { break }
            try await Task.sleep(for: .milliseconds(1))
        }
        let logAText = try String(contentsOf: logA, encoding: .utf8)
        try #require(!logAText.contains(" rename "), "A was stopped too late: \(logAText.suffix(400))")
        try #require(!FileManager.default.fileExists(atPath: destination))

        // 4. B: resume --state backup, killed right after it made its own copy under the same name.
        let b = try await CLIProcess.run(
            ["resume", "--state", backup, "-q"], in: scratch.url,
            environment: [
                "RESUMABLE_STEP_LOG": scratch.file("stepsB.log").path,
                "RESUMABLE_CRASH_AFTER_STEP_MATCHING": "create " + copyPath,
            ])
        // Since the fix, B finds A's copy locked and leaves it alone (exit 75, its download kept to resume); before,
        // it removed it and made its own (killed here, 137). Either way A must end with the exact file or none.
        #expect(b.exitCode == 75 || b.exitCode == 137, "\(b)")

        // 5. A goes on.
        a.send(SIGCONT)
        let resultA = try await a.finish()
        var status = stat()
        let size: Int64 = lstat(destination, &status) == 0 ? Int64(status.st_size) : -1
        if resultA.exitCode == 0 {
            #expect(
                size == length,
                "A exited 0 (\(resultA.stdout)\(resultA.stderr)) and out/a.bin is \(size) bytes, not \(length)")
        } else {
            #expect(size == -1 || size == length, "A failed (\(resultA)) and left out/a.bin of \(size) bytes")
        }
    }
}
