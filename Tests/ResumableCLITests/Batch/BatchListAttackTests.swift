import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review of batches through the real binary: state directories that moved, hostile lists.
@Suite("Batch list attack: moved stores and hostile lists")
struct BatchListAttackTests {
    /// Rule broken: nothing downloaded is lost without need (rule 2); a record that cannot be used is reported and
    /// left where it is, and then nothing is removed (`docs/task-store.md`, Restoring and Cleaning up); exit 0/75 or
    /// 65, not a download "failed for good".
    ///
    /// Sequence: `get -i list.txt -o out/ --state state` holds a 1 MiB file at 100,000 bytes; SIGINT pauses it into
    /// the store (exit 130: a record, paused, whose token names `state/partial/.resumable-….partial`, and that file
    /// with 100,000 bytes). The user moves the state directory (`mv state moved`, as when the folder holding it is
    /// moved or restored from a backup) and runs `resume --state moved`. `DownloadQueue.restore()` loads the record
    /// without checking where its token's temporary file is, keeps the paths the tokens name (`state/partial/…`,
    /// gone), and removes every other temporary file of `moved/partial/`: the 100,000 bytes are deleted. Then the
    /// start fails with `invalidToken` (`Reconciliation.checkPlacement`: the token's file is not in `moved/partial/`
    /// nor in the destination's directory), `ended(_:result:)` treats that as a failure without a token and removes
    /// the record. Observed: exit 1, "0 finished, 1 failed, 0 left to resume", the record and the temporary file both
    /// gone; the file must be downloaded again from byte 0 by hand.
    @Test(
        "resume --state on a state directory that was moved keeps the bytes: it continues, or refuses and removes nothing"
    )
    func resumeMovedStateDirectory() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let content = try await PausedBatch.make(
            server: server, in: scratch, path: "/moved.bin", seed: 41, state: "state",
            partialDirectory: scratch.url.appendingPathComponent("state/partial"))
        let moved = scratch.url.appendingPathComponent("moved")
        try FileManager.default.moveItem(at: scratch.url.appendingPathComponent("state"), to: moved)
        let movedPartial = moved.appendingPathComponent("partial")
        try #require(PausedBatch.temporaryFiles(in: movedPartial).values.contains(100_000))
        let records = try FileManager.default.contentsOfDirectory(atPath: moved.appendingPathComponent("tasks").path)
        try #require(records.filter { $0.hasSuffix(".json") }.count == 1, "\(records)")

        let resumed = try await CLIProcess.run(["resume", "--state", "moved", "-q"], in: scratch.url)
        #expect(resumed.signal == nil, "\(resumed)")
        let finished = (try? Data(contentsOf: scratch.url.appendingPathComponent("out/moved.bin"))) == Data(content)
        if finished {
            // Continued from the bytes on disk, not downloaded again.
            #expect(server.requests(for: "/moved.bin").last?.header("Range") == "bytes=100000-", "\(resumed)")
        } else {
            // Refused: the record and its bytes are left where they are.
            #expect(resumed.exitCode == 65, "\(resumed)")
            #expect(
                PausedBatch.temporaryFiles(in: movedPartial).values.contains(100_000),
                "the 100,000 bytes on disk were deleted: \(resumed)")
            let left =
                (try? FileManager.default.contentsOfDirectory(atPath: moved.appendingPathComponent("tasks").path))
            #expect(left?.filter { $0.hasSuffix(".json") }.count == 1, "the record was removed: \(resumed)")
        }
    }

    /// Rule broken: a list line must never make the tool replace a file that is not its own (rule 3), here the
    /// store's own lock; and a store is used by one process at a time, a second one exits 75 (`docs/cli.md`).
    ///
    /// Sequence found: `get -i list.txt -j 2 -o out/ --state out --overwrite` (the state directory is the output
    /// directory), where the list is `/small.bin` with `  out=lock`, then `/held.bin`. With `--overwrite` the
    /// finished `small.bin` was renamed over `out/lock`, the `flock`ed file that keeps other processes off the store;
    /// a second process, `resume --state out`, then locked the new `lock` and downloaded `held.bin` beside the first.
    /// A server's suggested name (`lock`, `tasks`) did the same without any `out=`. Now an output directory that is
    /// the state directory, or lies inside it, is refused before anything is created or fetched (exit 64), as the
    /// library refuses such a destination (`DownloadQueue.add`, `invalidRequest`).
    @Test(
        "-o inside --state (out=lock, --overwrite): refused before anything is fetched; the store's lock stays",
        arguments: ["out/", "out/sub/"])
    func outputNameReplacesStoreLock(output: String) async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let small = Resource.generatedBytes(seed: 42, range: 0..<20_000)
        server.register(.bytes(small), at: "/small.bin")
        server.register(.bytes(small), at: "/held.bin")
        let list =
            server.url(for: "/small.bin").absoluteString + "\n  out=lock\n"
            + server.url(for: "/held.bin").absoluteString
            + "\n"
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let out = scratch.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
        // A store that is already there: its lock must survive.
        let store = try TaskStore(directory: out)
        let lock = out.appendingPathComponent("lock")
        let lockInode = try FileManager.default.attributesOfItem(atPath: lock.path)[.systemFileNumber] as? NSNumber

        let result = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-j", "2", "-o", output, "--state", "out", "--overwrite"], in: scratch.url)
        #expect(result.exitCode == 64, "\(result)")
        #expect(result.stderr.contains("state directory"), "\(result)")
        #expect(server.requests(for: "/small.bin").isEmpty && server.requests(for: "/held.bin").isEmpty)
        #expect(
            try FileManager.default.attributesOfItem(atPath: lock.path)[.systemFileNumber] as? NSNumber == lockInode,
            "the store's lock file was replaced")
        #expect(try Data(contentsOf: lock).isEmpty)
        withExtendedLifetime(store) {}
    }

    /// The library's rule behind the CLI's: a queue with a store refuses a destination in the store's directory,
    /// and a restored record naming one is reported and left alone.
    @Test("DownloadQueue.add refuses a destination inside its store's directory")
    func queueRefusesDestinationInsideStore() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.url.appendingPathComponent("state")
        let queue = DownloadQueue(store: try TaskStore(directory: state))
        let url = URL(string: "http://127.0.0.1:9/f.bin")!
        for destination in [
            DownloadTask.Destination.directory(state), .file(state.appendingPathComponent("lock")),
            .directory(state.appendingPathComponent("tasks")), .directory(state.appendingPathComponent("new/deeper")),
        ] {
            let error = await #expect(throws: ResumableError.self) {
                try await queue.add(url, destination: destination, paused: true)
            }
            #expect(error?.code == .invalidRequest, "\(destination.tokenValue)")
        }
        // Beside the store is fine.
        _ = try await queue.add(url, destination: .directory(scratch.url), paused: true)
        #expect(await queue.items.count == 1)
    }

    /// Rule broken: a list line must never make the tool replace a file that is not its own (rule 3), and exit 0
    /// only when every file of the batch is complete (`docs/cli.md`).
    ///
    /// `InputList` refuses two entries with the same `out=` name, but not an `out=` name that is another entry's
    /// server name, nor two entries without `out=` whose server names are the same. With `--overwrite` (which is
    /// for files that were there before), the second download of the batch is renamed over the first one's
    /// finished file. Sequence: `get -i list.txt -j 1 -o out/ --overwrite` with `/x/a.bin` then `/y/a.bin` (or
    /// `/b.bin` with `  out=a.bin`). Observed: exit 0, "2 finished, 0 failed", and only one `a.bin`, the second
    /// file's bytes: the first file of the batch is gone.
    @Test(
        "Two entries of one list that end under one name with --overwrite: both files kept, or the list refused",
        arguments: [false, true])
    func twoEntriesOneNameOverwrite(outName: Bool) async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let first = Resource.generatedBytes(seed: 44, range: 0..<30_000)
        let second = Resource.generatedBytes(seed: 45, range: 0..<40_000)
        server.register(.bytes(first), at: "/x/a.bin")
        let secondPath = outName ? "/b.bin" : "/y/a.bin"
        server.register(.bytes(second), at: secondPath)
        let list =
            server.url(for: "/x/a.bin").absoluteString + "\n" + server.url(for: secondPath).absoluteString
            + (outName ? "\n  out=a.bin\n" : "\n")
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let result = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-j", "1", "-o", "out/", "--overwrite"], in: scratch.url)
        #expect(result.signal == nil, "\(result)")
        let out = scratch.url.appendingPathComponent("out")
        let files = try FileManager.default.contentsOfDirectory(atPath: out.path).filter { !$0.hasPrefix(".") }
        let contents = files.compactMap { try? Data(contentsOf: out.appendingPathComponent($0)) }
        if result.exitCode == 0 {
            #expect(
                contents.contains(Data(first)) && contents.contains(Data(second)),
                "exit 0, but a file of the batch was replaced by another: \(files) \(result)")
        } else {
            #expect(result.exitCode == 65, "\(result)")
            #expect(server.requests(for: "/x/a.bin").isEmpty, "\(result)")
        }
    }
}
