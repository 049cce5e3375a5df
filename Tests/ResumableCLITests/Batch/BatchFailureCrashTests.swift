import Foundation
import LoopbackServer
import Testing

/// A download of a batch that failed for good (a 404) stays in the store until the batch's summary reports it, so
/// that a crash before the summary cannot make the next `resume --state` call the batch complete.
@Suite("A batch killed after one of its downloads failed for good")
struct BatchFailureCrashTests {
    @Test("get -i killed after a 404 while another download runs: resume --state reports the 404 again and exits 1")
    func killedAfterAFailure() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let content = Resource.generatedBytes(seed: 77, range: 0..<(1 << 20))
        server.register(.bytes(content), at: "/held.bin")
        let gate = BodyGate(holdingAfter: 64 << 10)
        server.enqueue(behavior: Behavior(gate: gate), for: "/held.bin")
        defer { gate.open() }
        let list = [server.url(for: "/missing.bin"), server.url(for: "/held.bin")].map(\.absoluteString)
        try Data((list.joined(separator: "\n") + "\n").utf8).write(to: scratch.file("list.txt"))

        let process = try await CLIProcess.start(
            ["get", "-i", "list.txt", "-j", "2", "-o", "out/", "--state", "state", "--json"], in: scratch.url)
        // The 404 was judged and reported while the other download is held: the batch is still running.
        #expect(await gate.waitUntilHeld(timeout: CLIProcess.deadline), "\(gate) \(process.stderrSoFar)")
        let reported = try await eventually { process.stderrSoFar.contains("\"task-failed\"") }
        #expect(reported, "\(process.stderrSoFar)")
        process.send(SIGKILL)
        let killed = try await process.finish()
        #expect(killed.signal == SIGKILL, "\(killed)")

        let listed = try await CLIProcess.run(["list", "--state", "state"], in: scratch.url)
        #expect(listed.stdout.contains("failed"), "the failure is in the store: \(listed)")
        server.clearRequests()
        let resumed = try await CLIProcess.run(["resume", "--state", "state"], in: scratch.url)
        #expect(resumed.exitCode == 1, "a file of the batch is missing: \(resumed)")
        #expect(resumed.stderr.contains("1 finished, 1 failed, 0 left"), "\(resumed.stderr)")
        #expect(resumed.stderr.contains("404"), "\(resumed.stderr)")
        #expect(server.requests(for: "/missing.bin").count == 1, "asked again")
        let out = scratch.url.appendingPathComponent("out")
        #expect(try Data(contentsOf: out.appendingPathComponent("held.bin")) == Data(content))
        #expect(!FileManager.default.fileExists(atPath: out.appendingPathComponent("missing.bin").path))
        // Reported, the failure left the store: nothing is left to resume.
        let tasks = scratch.url.appendingPathComponent("state/tasks").path
        #expect(try FileManager.default.contentsOfDirectory(atPath: tasks).filter { $0.hasSuffix(".json") }.isEmpty)
        let again = try await CLIProcess.run(["resume", "--state", "state"], in: scratch.url)
        #expect(again.exitCode == 0, "\(again)")
        #expect(again.stderr.contains("0 finished, 0 failed, 0 left") || again.stderr.isEmpty, "\(again.stderr)")
    }
}
