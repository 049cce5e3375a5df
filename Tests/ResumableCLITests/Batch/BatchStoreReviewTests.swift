import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Review of the many-downloads layer (`DownloadQueue`, `TaskStore`, `get -i`, `resume --state`) through the real
/// binary. Each test fails today and names the rule it breaks.
@Suite("Batch store review")
struct BatchStoreReviewTests {
    /// Rule broken: nothing downloaded is lost without need (and a batch's state must read back).
    ///
    /// **Failed on 1d99e01.** A list URL with a 400 KB fragment (never sent: the request line stays short) was
    /// downloaded, and its first checkpoint or its pause wrote a record of 1.2 MB (a record holds the URL three times,
    /// and JSON writes each `/` as `\/`), which `TaskStore` never reads back (at most 1 MiB): `resume --state` skipped
    /// it and exited 65, and the bytes in `partial/` were never resumed. Now a URL over ``HTTPURL/maximumLength`` is
    /// refused with its line before anything is added or fetched.
    @Test("A list URL with a 400 KB fragment is refused with its line, before anything is added or fetched")
    func longURLRefused() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        server.register(.bytes(Resource.generatedBytes(seed: 98, range: 0..<1000)), at: "/long.bin")
        let url = server.url(for: "/long.bin").absoluteString + "#" + String(repeating: "a", count: 400_000)
        try Data((server.url(for: "/long.bin").absoluteString + "\n" + url + "\n").utf8).write(
            to: scratch.file("list.txt"))
        let refused = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "-q"], in: scratch.url)
        #expect(refused.exitCode == 65, "\(refused.stderr.prefix(400))")
        #expect(refused.stderr.contains("line 2"), "\(refused.stderr.prefix(400))")
        #expect(refused.stderr.contains("bytes is longer than the 65536 taken"), "\(refused.stderr.prefix(400))")
        #expect(refused.stderr.utf8.count < 2000, "the message repeats the URL: \(refused.stderr.utf8.count) bytes")
        #expect(server.requests(for: "/long.bin").isEmpty, "a download of a refused list was started")
        #expect(!FileManager.default.fileExists(atPath: scratch.file("state/tasks").path))
    }

    /// The longest URL taken (64 KiB, its fragment all slashes: the longest JSON a URL of that length becomes) gives
    /// records that read back: paused at 100,000 bytes, `resume --state` asks for the rest and finishes the file.
    @Test("A list URL of exactly 64 KiB: the paused download's record reads back and resume --state finishes it")
    func longestURLRecordReadsBack() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let content = Resource.generatedBytes(seed: 98, range: 0..<(1 << 20))
        server.register(.bytes(content), at: "/long.bin")
        let gate = BodyGate(holdingAfter: 100_000)
        server.enqueue(behavior: Behavior(gate: gate), for: "/long.bin")
        let base = server.url(for: "/long.bin").absoluteString + "#"
        let url = base + String(repeating: "/", count: 65_536 - base.utf8.count)
        try Data((url + "\n").utf8).write(to: scratch.file("list.txt"))
        let process = try await CLIProcess.start(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "-q"], in: scratch.url)
        #expect(await gate.waitUntilHeld(count: 1, timeout: CLIProcess.deadline), "\(gate)")
        let partial = scratch.url.appendingPathComponent("state/partial")
        let written = try await eventually {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: partial.path)) ?? []
            let sizes = names.compactMap {
                (try? FileManager.default.attributesOfItem(atPath: partial.appendingPathComponent($0).path))?[.size]
                    as? NSNumber
            }
            return sizes.count == 1 && sizes[0].int64Value == 100_000
        }
        #expect(written)
        process.send(SIGINT)
        let interrupted = try await process.finish()
        gate.open()
        #expect(interrupted.exitCode == 130, "\(interrupted)")

        let resumed = try await CLIProcess.run(["resume", "--state", "state", "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "the paused download could not be continued: \(resumed.stderr.prefix(400))")
        expectSameBytes(
            try? Data(contentsOf: scratch.url.appendingPathComponent("out/long.bin")), content,
            "the file was never finished")
        #expect(
            server.requests(for: "/long.bin").last?.header("Range") == "bytes=100000-",
            "the 100,000 bytes on disk were not resumed")
    }

    /// Rule broken: a summary that lies (wrong exit status reported).
    ///
    /// `BatchRunner.runStore` turns a run that skipped unreadable records into exit 65 (`if exit == .success,
    /// unusable > 0 { return .dataError }`), but only after `report` printed the summary with the status it computed
    /// without them: `--json` prints `{"status":"completed", "left":0, "exitCode":0}` on standard output while the
    /// process exits 65 and the store still holds the record it skipped. A script that reads the object (what
    /// `--json` is for) believes the batch is complete.
    @Test("resume --state --json beside a damaged record: the summary object's exitCode and status match the exit")
    func jsonSummaryMatchesExitWithSkippedRecord() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let content = Resource.generatedBytes(seed: 99, range: 0..<50_000)
        server.register(.bytes(content), at: "/ok.bin")
        let state = scratch.url.appendingPathComponent("state")
        let out = try scratch.subdirectory("out")
        try BatchAttackTests.makeStore(
            state,
            records: [
                BatchAttackTests.record(
                    url: server.url(for: "/ok.bin").absoluteString, destination: out.path + "/", order: 0)
            ])
        let damaged = state.appendingPathComponent("tasks/11111111-1111-1111-1111-111111111111.json")
        try Data(#"{"version": 1, "id": "#.utf8).write(to: damaged)

        let resumed = try await CLIProcess.run(["resume", "--state", "state", "--json"], in: scratch.url)
        #expect(resumed.exitCode == 65, "\(resumed)")
        #expect(FileManager.default.fileExists(atPath: damaged.path))
        let line = try #require(resumed.stdoutLines.last)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(
            (object["exitCode"] as? NSNumber)?.int32Value == resumed.exitCode,
            "the summary says exit \(object["exitCode"] ?? "none"), the process exited \(resumed.exitCode.map(String.init) ?? "by a signal")"
        )
        #expect(object["status"] as? String == "failed", "the summary calls the batch complete: \(line)")
        #expect((object["skipped"] as? NSNumber)?.intValue == 1, "\(line)")
        #expect((object["finished"] as? NSNumber)?.intValue == 1, "\(line)")
        expectSameBytes(try Data(contentsOf: out.appendingPathComponent("ok.bin")), content)
    }

    /// Rule broken: a summary that lies, and a store the docs say is refused is used (docs/task-store.md: an `adding`
    /// beside a record whose download may hold bytes "contradicts that: both commands refuse the store (exit 65) and
    /// drop nothing").
    ///
    /// After an interrupted list addition, `BatchRunner.runList` restores the store to drop its records
    /// (`_ = await queue.restore()`) and discards the problems restore returns. A record it cannot read (here one of a
    /// newer version, whose token names 40,000 bytes in `partial/`) is neither checked for bytes nor reported: `get -i`
    /// downloads the list and says `completed`, exit 0, while the store keeps that record (and its `claims`), and the
    /// next `get -i` of the same store refuses with "holds unfinished downloads". `resume --state` on the same store
    /// would have said exit 65.
    @Test("get -i after an interrupted addition beside an unreadable record: not exit 0 'completed', the bytes kept")
    func interruptedAdditionWithUnreadableRecord() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let content = Resource.generatedBytes(seed: 100, range: 0..<50_000)
        server.register(.bytes(content), at: "/new.bin")
        let state = scratch.url.appendingPathComponent("state")
        let out = try scratch.subdirectory("out")
        let id = "22222222-2222-4222-8222-222222222222"
        let partial = state.appendingPathComponent("partial/.resumable-33333333-3333-4333-8333-333333333333.partial")
        var record = BatchAttackTests.record(
            url: server.url(for: "/other.bin").absoluteString, destination: out.path + "/", order: 0, state: "paused")
        record["id"] = id
        record["version"] = 2
        record["token"] = ["version": 2, "tempPath": partial.path, "offset": 40_000]
        try BatchAttackTests.makeStore(state, records: [record])
        try Data(count: 40_000).write(to: partial)
        try Data().write(to: state.appendingPathComponent("adding"))
        try Data((server.url(for: "/new.bin").absoluteString + "\n").utf8).write(to: scratch.file("list.txt"))

        let result = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "--json"], in: scratch.url)
        let recordLeft = FileManager.default.fileExists(atPath: state.appendingPathComponent("tasks/\(id).json").path)
        #expect(recordLeft, "the unreadable record was dropped")
        #expect(FileManager.default.fileExists(atPath: partial.path), "the unreadable record's bytes were removed")
        #expect(
            result.exitCode == 65,
            "exit \(result.exitCode.map(String.init) ?? "by a signal"), \(result.stdoutLines.last ?? "no summary")")
        #expect(result.stderr.contains("\(id).json"), "\(result.stderr.prefix(600))")
        #expect(server.requests(for: "/new.bin").isEmpty, "the list was downloaded beside a store refused")
        #expect(FileManager.default.fileExists(atPath: state.appendingPathComponent("adding").path))
    }
}
