import Foundation
import LoopbackServer
import Resumable
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review (helper 52) of 6e3db48 and 3e579d3: the token-is-its-own-temporary-file refusal, the move's
/// inode check, `Reconciliation.examine`'s same-directory rule, the `abandoned` hook, `get -i`'s `adding` mark.
@Suite("Late fixes under attack")
struct LateFixesAttackTests {
    /// Rule broken: 2 (a crash leaves what a resume needs, and nothing safely on disk is downloaded again;
    /// docs/cli.md: a crash right after the move → "already finished", exit 65, nothing downloaded).
    ///
    /// Sequence: `get URL -o out/` is killed (the crash seam, as kill -9) right after the rename of the finished file
    /// into `out/f.bin`, before the token file goes. `resume TOKEN -o view/`, where `view` is a symbolic link to
    /// `out` (the same directory, spelled otherwise: a symlinked home, a mount alias).
    ///
    /// 6e3db48 made `Reconciliation.examine` look for the finished file only when the caller's destination lies in
    /// "the same directory" as the token's, compared as strings after `standardizedFileURL` (which resolves no link).
    /// Observed: `view/` is judged another directory, the temporary file is gone, so the download starts over and
    /// saves a second copy, `out/f (1).bin`, exit 0. Without `-o`, or with `-o out/`, the same state says "already
    /// finished". Fix idea: compare the two directories by device and inode (`stat`, following links), falling back
    /// to the byte comparison only when one cannot be looked at.
    @Test("resume -o through a symlink to the token's own directory after a crash right after the move")
    func symlinkedSameDirectoryAfterCrashAfterMove() async throws {
        let scratch = try ScratchDirectory()
        let output = try scratch.subdirectory("out")
        let served = try ServedFile(length: 200_000, path: "/f.bin", seed: 5201)
        let finished = output.appendingPathComponent("f.bin")
        let crashed = try await CLIProcess.run(
            ["get", served.url, "-o", output.path + "/", "-q", "--transport", "libcurl"], in: scratch.url,
            environment: ["RESUMABLE_CRASH_AFTER_STEP_MATCHING": "rename \(finished.path)"])
        try #require(crashed.exitCode == 137, "\(crashed)")
        let tokenPath = output.appendingPathComponent("f.bin.resumable.json").path
        try #require(FileManager.default.fileExists(atPath: tokenPath), "\(scratch.contents(of: output))")
        try requireSameBytes(Data(contentsOf: finished), served.bytes)
        let view = scratch.file("view")
        try #require(symlink(output.path, view.path) == 0)

        let resumed = try await CLIProcess.run(
            ["resume", tokenPath, "-o", view.path + "/", "-q", "--transport", "libcurl"], in: scratch.url)
        let names = scratch.contents(of: output)
        #expect(
            !names.contains("f (1).bin"),
            "the finished file was downloaded a second time into the same directory: \(names); \(resumed)")
        #expect(resumed.exitCode == 65 && resumed.stderr.contains("already finished"), "\(names); \(resumed)")
    }

    /// Rule broken: the store's own promise (docs/task-store.md: every file of `partial/` is a download's; a download
    /// that ends with nothing to resume has its temporary file removed) and the user's disk: a whole file's worth of
    /// bytes is left where nothing names it and no later batch looks.
    ///
    /// Sequence: `get -i LIST --state state` of one file with a wrong `sha256=`; the body is let through in steps
    /// until a checkpoint put a token in the record, then one write of the record fails (here: a directory sits at
    /// `tasks/<id>.json.writing`, as a full disk or an I/O error would fail it) and the body ends.
    ///
    /// 3e579d3: the mismatch's `abandoned` hook, `TaskStore.forgetToken`, cannot rewrite the record, returns false,
    /// and the engine keeps the temporary file "so that the token still describes bytes on disk". But the queue
    /// then removes the record anyway (`DownloadQueue.ended`, a failure without a token: `store.remove(id)`), whose
    /// unlink succeeds. Observed: exit 1 with "it was deleted", no record, and `state/partial/` keeps the whole
    /// temporary file; a later `get -i` on the same store (which restores nothing when no record is left) never
    /// removes it. Fix idea: when `abandoned` returned false, the queue must keep the record (with its token, state
    /// failed) rather than remove it, or retry the removal of the file once the record is gone
    /// (`removeUnownedTemporaryFiles(keeping: [], only: tempPath)` after `store.remove(id)`).
    @Test("a checksum mismatch whose record cannot be rewritten leaves no unnamed temporary file in the store")
    func mismatchWithUnwritableRecordLeavesOrphan() async throws {
        let scratch = try ScratchDirectory()
        let length: Int64 = 400_000
        let served = try ServedFile(length: length, path: "/f.bin", seed: 5202)
        let gate = served.holdBody(after: 16 * 1024)
        let wrong = String(repeating: "ab", count: 32)
        try Data("\(served.url)\n  sha256=\(wrong)\n".utf8).write(to: scratch.file("list.txt"))
        let tasks = scratch.url.appendingPathComponent("state/tasks")
        let partial = scratch.url.appendingPathComponent("state/partial")
        let batch = try CLIProcess(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "-j", "1", "--transport", "libcurl"],
            in: scratch.url)
        /// The record file whose token covers bytes, if any.
        @Sendable func recordWithBytes() -> String? {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: tasks.path)) ?? []
            for name in names where name.hasSuffix(".json") {
                guard let data = try? Data(contentsOf: tasks.appendingPathComponent(name)),
                    let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
                    let token = object["token"] as? [String: Any], let offset = token["offset"] as? Int, offset > 0
                else { continue }
                return name
            }
            return nil
        }
        // As soon as a checkpoint with bytes reaches the record, on the trickle's own thread (never held up by a busy
        // cooperative pool): the next write of this record fails (the sibling it is written through cannot be
        // created), and the rest of the body goes at once, long before the next checkpoint is due (a second later),
        // so that the checksum, not a checkpoint, ends the download.
        let planted = Mutex<String?>(nil)
        let checkpointed = try await trickle(gate, bodyLength: length, step: 1024, timeout: .seconds(60)) {
            // (A record write under way has its own sibling there for an instant: planted once it is gone.)
            guard let record = recordWithBytes(),
                (try? FileManager.default.createDirectory(
                    at: tasks.appendingPathComponent(record + ".writing"), withIntermediateDirectories: false)) != nil
            else { return false }
            planted.withLock { $0 = record }
            gate.open()
            return true
        }
        let dump = scratch.contents(of: tasks).map { name in
            name + ": " + ((try? String(contentsOf: tasks.appendingPathComponent(name), encoding: .utf8)) ?? "?")
        }
        try #require(
            checkpointed, "no checkpoint reached the record: \(dump); \(gate.limit ?? -1); \(batch.stderrSoFar)")
        let record = try #require(planted.withLock { $0 })
        let blocker = tasks.appendingPathComponent(record + ".writing")
        let result = try await batch.finish()
        try FileManager.default.removeItem(at: blocker)
        #expect(result.exitCode == 1 && result.stderr.contains("SHA-256"), "\(result)")
        let records = scratch.contents(of: tasks).filter { $0.hasSuffix(".json") }
        let orphans = scratch.contents(of: partial)
        #expect(
            !(records.isEmpty && !orphans.isEmpty),
            "no record is left, but partial/ keeps \(orphans) (the mismatched download's bytes); \(result)")

        // A later batch on the same store: it restores nothing, and so removes nothing.
        let other = try ServedFile(length: 10_000, path: "/g.bin", seed: 5203)
        try Data("\(other.url)\n".utf8).write(to: scratch.file("list2.txt"))
        let later = try await CLIProcess.run(
            ["get", "-i", "list2.txt", "-o", "out/", "--state", "state", "-q", "--transport", "libcurl"],
            in: scratch.url)
        #expect(later.exitCode == 0, "\(later)")
        #expect(
            scratch.contents(of: partial).isEmpty,
            "after a later batch, partial/ still keeps \(scratch.contents(of: partial))")
    }
}
