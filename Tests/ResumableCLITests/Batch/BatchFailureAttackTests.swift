import Foundation
import LoopbackServer
import Testing

/// Adversarial review of 7ada521 (a batch's failure for good stays in the store until the summary reports it).
@Suite("Failures for good in a batch, attacked: a signal after them, a start that fails on a full disk")
struct BatchFailureAttackTests {
    /// `get -i` with a 404 and a held download: SIGINT pauses the held one (exit 130, "1 left to resume"); the
    /// summary reported the 404, then the batch removed its record. `resume --state`, the command the summary names,
    /// finishes the held download and exits 0: the batch is called complete while one of its files is missing.
    @Test("SIGINT after a 404 in get -i: the resume --state that continues the batch must not exit 0")
    func interruptedAfterAFailure() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let content = Resource.generatedBytes(seed: 58, range: 0..<(1 << 20))
        server.register(.bytes(content), at: "/held.bin")
        let gate = BodyGate(holdingAfter: 64 << 10)
        server.enqueue(behavior: Behavior(gate: gate), for: "/held.bin")
        defer { gate.open() }
        let list = [server.url(for: "/missing.bin"), server.url(for: "/held.bin")].map(\.absoluteString)
        try Data((list.joined(separator: "\n") + "\n").utf8).write(to: scratch.file("list.txt"))

        let process = try await CLIProcess.start(
            ["get", "-i", "list.txt", "-j", "2", "-o", "out/", "--state", "state", "--json"], in: scratch.url)
        #expect(await gate.waitUntilHeld(timeout: CLIProcess.deadline), "\(gate) \(process.stderrSoFar)")
        let reported = try await eventually { process.stderrSoFar.contains("\"task-failed\"") }
        #expect(reported, "\(process.stderrSoFar)")
        process.send(SIGINT)
        let interrupted = try await process.finish()
        #expect(interrupted.exitCode == 130, "\(interrupted)")
        gate.open()

        let resumed = try await CLIProcess.run(["resume", "--state", "state"], in: scratch.url)
        let out = scratch.url.appendingPathComponent("out")
        #expect(try Data(contentsOf: out.appendingPathComponent("held.bin")) == Data(content))
        #expect(!FileManager.default.fileExists(atPath: out.appendingPathComponent("missing.bin").path))
        #expect(
            resumed.exitCode != 0,
            "the batch's missing.bin is missing, yet the resume --state that continued it says it is complete: \(resumed)"
        )
    }

    /// A batch paused by SIGINT holds 100,000 bytes and a record with its token. `resume --state` on a full disk
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
        let full = try await CLIProcess.start(["resume", "--state", "state"], in: scratch.url, fileSizeLimit: 1)
        let failed = try await full.finish()
        #expect(failed.exitCode != 0, "\(failed)")
        #expect(partialSizes() == [100_000], "the 100,000 bytes downloaded were deleted: \(failed)")

        let resumed = try await CLIProcess.run(["resume", "--state", "state"], in: scratch.url)
        let file = scratch.url.appendingPathComponent("out/g.bin")
        #expect(
            FileManager.default.fileExists(atPath: file.path) || resumed.exitCode != 0,
            "resume --state exits 0 while the batch's only file was never downloaded: \(resumed)")
        if FileManager.default.fileExists(atPath: file.path) {
            #expect(try Data(contentsOf: file) == Data(content))
        }
    }
}
