import Foundation
import LoopbackServer
import Testing

/// A download of a batch that failed for good (a 404) stays in the store until a summary reports it and nothing else
/// is left, so that no later `resume --state` calls the batch complete without it: not after a crash, not after a
/// signal. And only a failure for good is treated so: a resumable download whose start failed keeps its bytes.
@Suite("Failures for good in a batch: kept until the batch is over")
struct BatchFailureTests {
    /// `get -i` of `/missing.bin` (404) and `/held.bin` (held at 64 KiB), with `--json`, once its `task-failed` line
    /// came: the 404 was judged and reported while the batch still runs.
    struct FailedThenHeld {
        let server: LoopbackServer
        let scratch: ScratchDirectory
        let content: [UInt8]
        let gate: BodyGate
        let process: CLIProcess

        static func start() async throws -> FailedThenHeld {
            let server = try LoopbackServer()
            let scratch = try ScratchDirectory()
            let content = Resource.generatedBytes(seed: 77, range: 0..<(1 << 20))
            server.register(.bytes(content), at: "/held.bin")
            let gate = BodyGate(holdingAfter: 64 << 10)
            server.enqueue(behavior: Behavior(gate: gate), for: "/held.bin")
            let list = [server.url(for: "/missing.bin"), server.url(for: "/held.bin")].map(\.absoluteString)
            try Data((list.joined(separator: "\n") + "\n").utf8).write(to: scratch.file("list.txt"))
            let process = try await CLIProcess.start(
                ["get", "-i", "list.txt", "-j", "2", "-o", "out/", "--state", "state", "--json"], in: scratch.url)
            #expect(await gate.waitUntilHeld(timeout: CLIProcess.deadline), "\(gate) \(process.stderrSoFar)")
            let reported = try await eventually { process.stderrSoFar.contains("\"task-failed\"") }
            #expect(reported, "\(process.stderrSoFar)")
            return FailedThenHeld(server: server, scratch: scratch, content: content, gate: gate, process: process)
        }

        var out: URL { scratch.url.appendingPathComponent("out") }

        /// `resume --state state`, which must ask for the 404 again and exit 1, with held.bin whole and nothing left.
        func expectResumeReportsTheFailure() async throws {
            server.clearRequests()
            let resumed = try await CLIProcess.run(["resume", "--state", "state"], in: scratch.url)
            #expect(resumed.exitCode == 1, "a file of the batch is missing: \(resumed)")
            #expect(resumed.stderr.contains("1 finished, 1 failed, 0 left"), "\(resumed.stderr)")
            #expect(resumed.stderr.contains("404"), "\(resumed.stderr)")
            #expect(server.requests(for: "/missing.bin").count == 1, "asked again")
            try expectSameBytes(Data(contentsOf: out.appendingPathComponent("held.bin")), Data(content))
            #expect(!FileManager.default.fileExists(atPath: out.appendingPathComponent("missing.bin").path))
            // Reported with nothing else left, the failure left the store: the next run has nothing to do.
            let tasks = scratch.url.appendingPathComponent("state/tasks").path
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: tasks).filter { $0.hasSuffix(".json") }.isEmpty)
            let again = try await CLIProcess.run(["resume", "--state", "state"], in: scratch.url)
            #expect(again.exitCode == 0, "\(again)")
        }
    }

    @Test("get -i killed after a 404 while another download runs: resume --state reports the 404 again and exits 1")
    func killedAfterAFailure() async throws {
        let batch = try await FailedThenHeld.start()
        defer {
            batch.gate.open()
            batch.server.shutdown()
        }
        batch.process.send(SIGKILL)
        let killed = try await batch.process.finish()
        #expect(killed.signal == SIGKILL, "\(killed)")
        let listed = try await CLIProcess.run(["list", "--state", "state"], in: batch.scratch.url)
        #expect(listed.stdout.contains("failed"), "the failure is in the store: \(listed)")
        batch.gate.open()
        try await batch.expectResumeReportsTheFailure()
    }

    /// Found by an attack (helper 58): SIGINT paused the held download ("1 left to resume"), the summary reported the
    /// 404, and the batch then removed its record, so the `resume --state` the summary names exited 0.
    @Test("SIGINT after a 404 in get -i: the resume --state that continues the batch reports it again")
    func interruptedAfterAFailure() async throws {
        let batch = try await FailedThenHeld.start()
        defer {
            batch.gate.open()
            batch.server.shutdown()
        }
        batch.process.send(SIGINT)
        let interrupted = try await batch.process.finish()
        #expect(interrupted.exitCode == 130, "\(interrupted)")
        batch.gate.open()
        try await batch.expectResumeReportsTheFailure()
    }

    /// Found by an attack (helper 58). A batch paused by SIGINT holds 100,000 bytes and a record with its token. `resume --state` on a full disk
    /// (`ulimit -f 1`: the record cannot be rewritten when the download starts) ends that download failed with the
    /// store's write error, which carries no token: the batch takes it for a failure for good and, after its summary,
    /// cancels it, deleting the 100,000 bytes and the record. The next `resume --state`, on a disk with room again,
    /// finds nothing, exits 0, and the file was never downloaded.
    @Test("A record that cannot be rewritten at start is not a failure for good: its bytes and record stay")
    func unwritableRecordAtStart() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let content = Resource.generatedBytes(seed: 59, range: 0..<(1 << 20))
        server.register(.bytes(content), at: "/g.bin")
        let gate = BodyGate(holdingAfter: 100_000)
        server.enqueue(behavior: Behavior(gate: gate), for: "/g.bin")
        defer { gate.open() }
        try Data((server.url(for: "/g.bin").absoluteString + "\n").utf8).write(to: scratch.file("list.txt"))
        let process = try await CLIProcess.start(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state"], in: scratch.url)
        #expect(await gate.waitUntilHeld(timeout: CLIProcess.deadline), "\(gate)")
        let partial = scratch.url.appendingPathComponent("state/partial")
        func partialSizes() -> [Int64] {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: partial.path)) ?? []
            return names.compactMap {
                ((try? FileManager.default.attributesOfItem(atPath: partial.appendingPathComponent($0).path))?[.size]
                    as? NSNumber)?.int64Value
            }
        }
        #expect(try await eventually { partialSizes() == [100_000] }, "\(partialSizes())")
        process.send(SIGINT)
        let interrupted = try await process.finish()
        #expect(interrupted.exitCode == 130, "\(interrupted)")
        gate.open()

        // The disk is full: no file may grow past 512 bytes.
        let full = try await CLIProcess.start(
            ["resume", "--state", "state", "--json"], in: scratch.url, fileSizeLimit: 1)
        let failed = try await full.finish()
        #expect(failed.exitCode != 0, "\(failed)")
        #expect(partialSizes() == [100_000], "the 100,000 bytes downloaded were deleted: \(failed)")
        // And the event says so (helper 61: it said `"resumable": false`, reading the store's error, which carries no
        // token, while the record kept its token and bytes).
        let failedEvents = failed.stderrLines.filter { $0.contains("\"task-failed\"") }
        #expect(failedEvents.count == 1, "\(failed)")
        #expect(failedEvents.allSatisfy { $0.contains("\"resumable\":true") }, "\(failedEvents)")

        let resumed = try await CLIProcess.run(["resume", "--state", "state"], in: scratch.url)
        let file = scratch.url.appendingPathComponent("out/g.bin")
        #expect(
            FileManager.default.fileExists(atPath: file.path) || resumed.exitCode != 0,
            "resume --state exits 0 while the batch's only file was never downloaded: \(resumed)")
        if FileManager.default.fileExists(atPath: file.path) {
            try expectSameBytes(Data(contentsOf: file), Data(content))
        }
    }
}
