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
    /// `DownloadQueue.insert` checks that a record can hold the destination (`TaskRecord.canHold`), but not the URL,
    /// and `TaskStore.write` writes a record of any size, while `TaskStore.readRecordFile` refuses one over 1 MiB. A
    /// record with a token holds the URL three times (`url`, `token.url`, `token.originalURL`). A list line whose URL
    /// carries a 400 KB fragment (never sent to the server: the request line stays short) is downloaded, and its
    /// first checkpoint or its pause writes a record of 1.2 MB that no later run can read: `resume --state` skips it
    /// ("not a regular file of at most 1 MiB") and exits 65, the bytes in `partial/` are never resumed, and the next
    /// `get -i` of the same store refuses to start because the store holds that record. The batch said "1 left to
    /// resume". (Refusing such a URL before any request, like `add` refuses a destination a record cannot hold, also
    /// passes this test.)
    @Test("A list URL with a 400 KB fragment: the paused download's record reads back and resume --state finishes it")
    func longURLRecordReadsBack() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let content = Resource.generatedBytes(seed: 98, range: 0..<(1 << 20))
        server.register(.bytes(content), at: "/long.bin")
        let gate = BodyGate(holdingAfter: 100_000)
        server.enqueue(behavior: Behavior(gate: gate), for: "/long.bin")
        let url = server.url(for: "/long.bin").absoluteString + "#" + String(repeating: "a", count: 400_000)
        try Data((url + "\n").utf8).write(to: scratch.file("list.txt"))
        let process = try await CLIProcess.start(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "-q"], in: scratch.url)
        // A fix may refuse such a URL when the list is added, as `add` refuses a destination a record cannot hold:
        // then nothing may have been fetched.
        #expect(try await eventually { gate.heldCount > 0 || !process.isRunning })
        if gate.heldCount == 0 {
            let refused = try await process.finish()
            #expect(refused.exitCode == 65 || refused.exitCode == 64, "\(refused.stderr.prefix(400))")
            #expect(server.requests(for: "/long.bin").isEmpty, "a download the store cannot keep was started")
            return
        }
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
        #expect(
            (try? Data(contentsOf: scratch.url.appendingPathComponent("out/long.bin"))) == Data(content),
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
        #expect(object["status"] as? String != "completed", "the summary calls the batch complete: \(line)")
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
            !(result.exitCode == 0 && recordLeft),
            "exit 0 and \(result.stdoutLines.last ?? "no summary") while the store keeps a record it could not read")
    }
}
