import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review, through the real binary, of the day's fixes: moved or re-pathed state directories,
/// `--overwrite` within one batch (`FinalPathClaims`).
@Suite("Today's fixes under attack: the command line")
struct TodayFixesCLIAttackTests {
    /// The record files of the store in `state`.
    static func records(in state: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: state.appendingPathComponent("tasks").path)) ?? [])
            .filter { $0.hasSuffix(".json") }
    }

    /// Rule broken: nothing downloaded is lost without need (rule 2). `docs/task-store.md` (Restoring): "A store
    /// that was moved (renamed, restored from a backup elsewhere, or opened through another path) holds tokens that
    /// name their temporary files where they were" and still finds its bytes.
    ///
    /// Sequence: `real/` is a directory and `alias` a symbolic link to it (as `/home` → `/usr/home`, `/tmp` →
    /// `/private/tmp`, or a bind-mounted project folder). `get -i list.txt -o out/ --state alias/state` holds a
    /// 1 MiB file at 100,000 bytes; SIGINT pauses it into the store (exit 130). Then `resume --state real/state`:
    /// the same store, the same directory, through its other path (or the other way round).
    ///
    /// Observed: exit 1, "0 finished, 1 failed, 0 left to resume": the record is removed and the 100,000 bytes are
    /// left unowned in `partial/` (the next restore deletes them); the file must be fetched again from byte 0.
    /// `TaskStore.load()` re-homes a token only when its temporary file is gone; here it is still reachable at the
    /// old spelling, so the token keeps `alias/state/partial/…`. `Reconciliation.checkPlacement` then compares that
    /// directory with the queue's temporary directory `real/state/partial` as strings (lexically standardized, no
    /// symbolic link resolved), refuses the token with `invalidToken`, and `DownloadQueue.ended(_:result:)` treats an
    /// error without a token as a failure for good and removes the record.
    @Test(
        "resume --state through another path of the same store continues the paused download, or keeps everything",
        arguments: [true, false])
    func resumeThroughOtherPathOfSameStore(firstThroughAlias: Bool) async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        _ = try scratch.subdirectory("real")
        try FileManager.default.createSymbolicLink(
            atPath: scratch.file("alias").path, withDestinationPath: scratch.url.appendingPathComponent("real").path)
        let (first, second) = firstThroughAlias ? ("alias/state", "real/state") : ("real/state", "alias/state")
        let partial = scratch.url.appendingPathComponent("real/state/partial")
        let content = try await PausedBatch.make(
            server: server, in: scratch, path: "/aliased.bin", seed: 4201, state: first, partialDirectory: partial)
        try #require(Self.records(in: scratch.url.appendingPathComponent("real/state")).count == 1)

        let resumed = try await CLIProcess.run(["resume", "--state", second, "-q"], in: scratch.url)
        #expect(resumed.signal == nil, "\(resumed)")
        let finished = (try? Data(contentsOf: scratch.url.appendingPathComponent("out/aliased.bin"))) == Data(content)
        if finished {
            #expect(resumed.exitCode == 0, "\(resumed)")
            // Continued from the bytes on disk, not downloaded again.
            #expect(server.requests(for: "/aliased.bin").last?.header("Range") == "bytes=100000-", "\(resumed)")
        } else {
            Issue.record("the paused download did not finish: \(resumed)")
            #expect(
                PausedBatch.temporaryFiles(in: partial).values.contains(100_000),
                "the 100,000 bytes were deleted: \(resumed)")
            #expect(
                Self.records(in: scratch.url.appendingPathComponent("real/state")).count == 1,
                "the record was removed: the bytes are unowned, the next restore deletes them: \(resumed)")
        }
    }

    /// Rule broken: `--overwrite` "replaces files that were there before; never one this batch saved"
    /// (`docs/cli.md`), so no file is reported finished that is not that download's bytes (rule 1). A batch is
    /// interrupted and continued with `resume --state` all the time: it is still the same batch, the same store.
    ///
    /// Sequence: a list of `/x/a.bin` (30,000 bytes) and `/y/a.bin` (40,000 bytes, held after 10,000), both saved
    /// as `a.bin`. `get -i list.txt -j 2 -o out/ --state state --overwrite`: `/x/a.bin` finishes (reported
    /// finished, `out/a.bin` holds its bytes); SIGINT pauses `/y/a.bin` into the store (exit 130). Then
    /// `resume --state state --overwrite` (or, `interrupted` false: `kill -9` right after the rename of the first
    /// file, before its record left the store, with `-j 1`, so that the restore itself reports it finished).
    ///
    /// Observed: exit 0 and only one `a.bin`, holding `/y/a.bin`'s bytes: the first file of the batch is gone.
    /// `FinalPathClaims` lives in memory only, per `DownloadQueue`: the queue of the resumed process starts with no
    /// claim, and a download restored as `finishedEarlier` claims nothing either, so `Finisher.moveIntoPlace` sees
    /// `.overwrite` with `ours == true` and renames over the batch's own file.
    @Test(
        "A batch continued with resume --state --overwrite keeps the file it saved before the interruption",
        arguments: [true, false])
    func overwriteAcrossInterruption(interrupted: Bool) async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let first = Resource.generatedBytes(seed: 4202, range: 0..<30_000)
        let second = Resource.generatedBytes(seed: 4203, range: 0..<40_000)
        server.register(.bytes(first), at: "/x/a.bin")
        server.register(.bytes(second), at: "/y/a.bin")
        let list = server.url(for: "/x/a.bin").absoluteString + "\n" + server.url(for: "/y/a.bin").absoluteString + "\n"
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let out = scratch.url.appendingPathComponent("out")
        let saved = out.appendingPathComponent("a.bin")

        if interrupted {
            let gate = BodyGate(holdingAfter: 10_000)
            server.enqueue(behavior: Behavior(gate: gate), for: "/y/a.bin")
            let process = try await CLIProcess.start(
                ["get", "-i", "list.txt", "-j", "2", "-o", "out/", "--state", "state", "--overwrite"],
                in: scratch.url)
            #expect(await gate.waitUntilHeld(count: 1, timeout: CLIProcess.deadline), "\(gate)")
            let firstSaved = try await eventually { (try? Data(contentsOf: saved)) == Data(first) }
            try #require(firstSaved, "the first file was not saved")
            let partial = scratch.url.appendingPathComponent("state/partial")
            let checkpointed = try await eventually { PausedBatch.temporaryFiles(in: partial).values.contains(10_000) }
            try #require(checkpointed)
            process.send(SIGINT)
            let result = try await process.finish()
            gate.open()
            try #require(result.exitCode == 130, "\(result)")
        } else {
            // A dry run finds the step that renames the first file into place.
            let arguments = ["get", "-i", "list.txt", "-j", "1", "-o", "out/", "--state", "state", "--overwrite"]
            let dryScratch = try ScratchDirectory()
            try Data(list.utf8).write(to: dryScratch.file("list.txt"))
            let log = dryScratch.file("steps.log")
            let dry = try await CLIProcess.run(
                arguments, in: dryScratch.url, environment: ["RESUMABLE_STEP_LOG": log.path])
            try #require(dry.exitCode == 0, "\(dry)")
            let steps = try String(contentsOf: log, encoding: .utf8).split(separator: "\n").map {
                $0.split(separator: " ", maxSplits: 2).map(String.init)
            }
            let dryTarget = dryScratch.url.appendingPathComponent("out/a.bin").path
            let move = try #require(
                steps.first { $0.count == 3 && ($0[1] == "rename" || $0[1] == "link") && $0[2] == dryTarget },
                "no step moved a file to \(dryTarget): \(steps)")
            // The same step in the real run (by kind and path, not by number: checkpoints depend on timing).
            let crashed = try await CLIProcess.run(
                arguments, in: scratch.url,
                environment: ["RESUMABLE_CRASH_AFTER_STEP_MATCHING": move[1] + " " + saved.path])
            try #require(crashed.exitCode == 137, "\(crashed)")
            try requireSameBytes(Data(contentsOf: saved), Data(first), "the crash did not leave the first file")
        }

        let resumed = try await CLIProcess.run(
            ["resume", "--state", "state", "--overwrite", "-q"], in: scratch.url)
        #expect(resumed.signal == nil, "\(resumed)")
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: out.path)) ?? []).filter {
            !$0.hasPrefix(".")
        }
        let contents = files.compactMap { try? Data(contentsOf: out.appendingPathComponent($0)) }
        #expect(
            contents.contains(Data(first)),
            "the file the batch saved before the interruption was replaced: \(files.sorted()) \(resumed)")
        #expect(contents.contains(Data(second)), "\(files.sorted()) \(resumed)")
        // Once nothing is left to finish, the names the batch took are forgotten: a complete batch leaves no state.
        #expect(resumed.exitCode == 0, "\(resumed)")
        #expect(!FileManager.default.fileExists(atPath: scratch.url.appendingPathComponent("state/claims").path))
    }
}

extension TodayFixesCLIAttackTests {
    /// Rule: no file of a batch is lost or replaced by another of the same batch, and no hang (rules 1 and 4);
    /// `--overwrite` "never replaces one this batch saved" (`docs/cli.md`).
    ///
    /// Twenty entries whose server names are all `a.bin`, and three whose `out=` names are the free names the others
    /// get (`a (1).bin`, `a (2).bin`, `a (5).bin`), finishing eight at a time, with and without `--overwrite`: every
    /// file ends under its own name, each content exactly once, exit 0.
    @Test(
        "23 same-named entries of one batch finishing eight at a time keep 23 distinct files", arguments: [false, true])
    func manySameNamedEntries(overwrite: Bool) async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        var list = ""
        var contents: [Data] = []
        for index in 0..<23 {
            let bytes = Resource.generatedBytes(seed: 4300 + UInt64(index), range: 0..<Int64(20_000 + index * 97))
            contents.append(Data(bytes))
            server.register(.bytes(bytes), at: "/d\(index)/a.bin")
            list += server.url(for: "/d\(index)/a.bin").absoluteString + "\n"
            switch index {
            case 20: list += "  out=a (1).bin\n"
            case 21: list += "  out=a (2).bin\n"
            case 22: list += "  out=a (5).bin\n"
            default: break
            }
        }
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let out = scratch.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
        // A file that was there before: only it may be replaced, and only with --overwrite.
        try Data("before".utf8).write(to: out.appendingPathComponent("a (3).bin"))
        let result = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-j", "8", "-o", "out/", "-q"] + (overwrite ? ["--overwrite"] : []),
            in: scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: out.path)) ?? []).filter {
            !$0.hasPrefix(".")
        }
        let saved = files.compactMap { try? Data(contentsOf: out.appendingPathComponent($0)) }
        for (index, content) in contents.enumerated() {
            #expect(saved.filter { $0 == content }.count == 1, "entry \(index): \(files.sorted())")
        }
        #expect(saved.contains(Data("before".utf8)), "a file that was there before was replaced: \(files.sorted())")
        #expect(files.count == 24, "\(files.sorted())")
    }
}

extension TodayFixesCLIAttackTests {
    /// Rule broken: a finished file is never saved twice after a crash (rule 1: "no file downloaded twice that was
    /// safely on disk — not even after a crash at the worst instant"); `docs/task-store.md`: a crash between the move
    /// into place and the record's removal is reported `finishedEarlier`, nothing is done again.
    ///
    /// `docs/cli.md` allows a state directory on another file system than the output ("finished files are then
    /// renamed into place", otherwise copied). Sequence: `get -i list.txt -o out/ --state /dev/shm/…/state` (tmpfs,
    /// another file system), one 200,000-byte entry; a dry run lists the durable steps; the same batch is killed
    /// (`RESUMABLE_CRASH_AFTER_STEP_MATCHING`) right after the step that renames the copy to `out/a.bin`, before the temporary
    /// file in `partial/` is removed. Then `resume --state`.
    ///
    /// Observed: exit 0 and two files, `a.bin` and `a (1).bin`, with the same bytes. `PartialFile.move(to:replacing:)`
    /// on `EXDEV` copies beside the destination, renames the copy into place, then removes the temporary file; after
    /// a crash in between the temporary file is still there, whole, so `Reconciliation` sees a download to continue
    /// (not `interruptedFinish`: the copy is another inode), and the finish picks a free name beside its own copy.
    @Test(
        "A batch whose store is on another file system, killed right after the copy was renamed into place, keeps one file"
    )
    func crossDeviceCrashAfterRename() async throws {
        let shm = URL(fileURLWithPath: "/dev/shm", isDirectory: true)
        var status = stat()
        var scratchStatus = stat()
        let scratch = try ScratchDirectory()
        guard stat(shm.path, &status) == 0, stat(scratch.url.path, &scratchStatus) == 0,
            status.st_dev != scratchStatus.st_dev
        else {
            print("skipped: no /dev/shm on another file system than \(scratch.url.path)")
            return
        }
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let bytes = Resource.generatedBytes(seed: 4400, range: 0..<200_000)
        server.register(.bytes(bytes), at: "/a.bin")
        try Data((server.url(for: "/a.bin").absoluteString + "\n").utf8).write(to: scratch.file("list.txt"))
        let states = shm.appendingPathComponent("resumable-h42-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: states, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: states) }

        let log = scratch.file("steps.log")
        let dry = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "dry/", "--state", states.appendingPathComponent("dry").path, "-q"],
            in: scratch.url, environment: ["RESUMABLE_STEP_LOG": log.path])
        try #require(dry.exitCode == 0, "\(dry)")
        let steps = try String(contentsOf: log, encoding: .utf8).split(separator: "\n").map {
            $0.split(separator: " ", maxSplits: 2).map(String.init)
        }
        let target = scratch.url.appendingPathComponent("dry/a.bin").path
        let move = try #require(
            steps.first { $0.count == 3 && ($0[1] == "rename" || $0[1] == "link") && $0[2] == target },
            "no step moved the file to \(target): \(steps)")

        let state = states.appendingPathComponent("state").path
        let crashed = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "out/", "--state", state, "-q"], in: scratch.url,
            environment: [
                "RESUMABLE_CRASH_AFTER_STEP_MATCHING": move[1] + " "
                    + scratch.url.appendingPathComponent("out/a.bin").path
            ])
        try #require(crashed.exitCode == 137, "\(crashed)")
        let out = scratch.url.appendingPathComponent("out")
        try requireSameBytes(Data(contentsOf: out.appendingPathComponent("a.bin")), Data(bytes))

        let resumed = try await CLIProcess.run(["resume", "--state", state, "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: out.path)) ?? []).filter {
            !$0.hasPrefix(".")
        }
        #expect(files == ["a.bin"], "the finished file was saved a second time: \(files.sorted()) \(resumed)")
        try expectSameBytes(Data(contentsOf: out.appendingPathComponent("a.bin")), Data(bytes))
    }
}

extension TodayFixesCLIAttackTests {
    /// Rule: "The output directory must not be the state directory or lie inside it (exit 64)", refused "before
    /// anything is created" (`docs/cli.md`, `GetCommand`).
    ///
    /// Sequence: `alias` is a symbolic link to `real/`; `get -i list.txt -o real/st --state alias/st` where `st` does
    /// not exist yet: the output directory and the state directory are one directory.
    ///
    /// Observed: exit 1 (not 64), after `real/st/` was created with the store's `lock`, `tasks/` and `partial/` in
    /// it; only `DownloadQueue.add` refused the line. `TaskStore.directory(_:holds:)` returns false as soon as the
    /// state directory does not resolve (`resolved(root)` is nil), so the CLI's check compares `real/st` and
    /// `alias/st` as spelled.
    @Test("-o equal to a --state that does not exist yet, through a symbolic link: exit 64, nothing created")
    func outputIsStateThroughSymlinkNotYetCreated() async throws {
        let scratch = try ScratchDirectory()
        _ = try scratch.subdirectory("real")
        try FileManager.default.createSymbolicLink(
            atPath: scratch.file("alias").path, withDestinationPath: scratch.url.appendingPathComponent("real").path)
        try Data("http://127.0.0.1:9/lock\n".utf8).write(to: scratch.file("list.txt"))
        let result = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "real/st", "--state", "alias/st", "--retries", "0", "-q"],
            in: scratch.url)
        #expect(result.exitCode == 64, "\(result)")
        #expect(
            !FileManager.default.fileExists(atPath: scratch.url.appendingPathComponent("real/st").path),
            "created: \(scratch.contents(of: scratch.url.appendingPathComponent("real/st")))")
    }
}

extension TodayFixesCLIAttackTests {
    /// Rule broken: nothing downloaded is lost without need (rule 2); a state directory "may be moved, or restored
    /// from a backup elsewhere: its records still find their bytes in its own `partial/`" (`docs/cli.md`).
    ///
    /// Sequence: `get -i list.txt -o out/ --state state` holds a 1 MiB file at 100,000 bytes; SIGINT pauses it
    /// (exit 130). The state directory is copied (`cp -R state copy`, a backup restored beside the original, which
    /// is left alone), and the batch is continued from the copy: `resume --state copy`.
    ///
    /// Observed: exit 1, "0 finished, 1 failed": the copy's record is removed and its 100,000 bytes deleted at once.
    /// `TaskStore.load()` leaves a token whose file still exists at its old path (`state/partial/…`) as it is;
    /// `DownloadQueue.restore()` then keeps only that path, and `removeUnownedTemporaryFiles` deletes the copy's file
    /// of the same name (another inode); the start fails with `invalidToken` (`Reconciliation.checkPlacement`: not in
    /// `copy/partial`), and `ended(_:result:)` removes the record.
    @Test("resume --state on a copy of a state directory continues from the copy's bytes, or keeps them")
    func resumeCopyOfStateDirectory() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let partial = scratch.url.appendingPathComponent("state/partial")
        let content = try await PausedBatch.make(
            server: server, in: scratch, path: "/copied.bin", seed: 4205, state: "state", partialDirectory: partial)
        let copy = scratch.url.appendingPathComponent("copy")
        try FileManager.default.copyItem(at: scratch.url.appendingPathComponent("state"), to: copy)
        try #require(PausedBatch.temporaryFiles(in: copy.appendingPathComponent("partial")).values.contains(100_000))

        let resumed = try await CLIProcess.run(["resume", "--state", "copy", "-q"], in: scratch.url)
        #expect(resumed.signal == nil, "\(resumed)")
        let finished = (try? Data(contentsOf: scratch.url.appendingPathComponent("out/copied.bin"))) == Data(content)
        if finished {
            #expect(resumed.exitCode == 0, "\(resumed)")
            #expect(server.requests(for: "/copied.bin").last?.header("Range") == "bytes=100000-", "\(resumed)")
        } else {
            Issue.record("the paused download did not finish: \(resumed)")
            #expect(
                PausedBatch.temporaryFiles(in: copy.appendingPathComponent("partial")).values.contains(100_000),
                "the copy's 100,000 bytes were deleted: \(resumed)")
            #expect(Self.records(in: copy).count == 1, "the copy's record was removed: \(resumed)")
        }
    }
}
