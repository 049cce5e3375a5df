import Foundation
import LoopbackServer
import Testing

/// Adversarial review of 7ada521 and b98fe2f (a batch's failures for good stay in the store until the batch is over).
@Suite(
    "A batch's failures, attacked: transient ones before the first byte, a full disk, what task-failed says (helper 61)"
)
struct BatchFailureExitAttackTests {
    /// A batch of two files; the server of one answers 503 to every request (down for maintenance) and the retries
    /// run out before its first byte. That is a transient failure ("retries ran out", docs/cli.md: exit 75, and
    /// `resume --state` continues it), not a failure for good, but the queue marks every failure without a token as
    /// one (`failedForGood = stored == nil`, whatever the error): once the other file is done the batch calls itself
    /// over, reports the 503 with exit 1 and removes its record. When the server is back, the `resume --state` the
    /// documentation promises finds an empty store and exits 0, and the file was never downloaded.
    @Test("A 503 until the retries run out, before any byte: exit 75, and the resume --state that follows fetches it")
    func transientFailureBeforeTheFirstByte() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let ok = Resource.generatedBytes(seed: 611, range: 0..<(256 << 10))
        let busy = Resource.generatedBytes(seed: 612, range: 0..<(256 << 10))
        server.register(.bytes(ok), at: "/ok.bin")
        var unavailable = Resource.bytes(busy)
        unavailable.behavior = Behavior(status: 503, retryAfter: "0")
        server.register(unavailable, at: "/busy.bin")
        let list = [server.url(for: "/ok.bin"), server.url(for: "/busy.bin")].map(\.absoluteString)
        try Data((list.joined(separator: "\n") + "\n").utf8).write(to: scratch.file("list.txt"))

        let first = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "--retries", "0"], in: scratch.url)
        #expect(
            first.exitCode == 75,
            "the only failure is a 503 after the retries ran out: a transient one, to try again later: \(first)")
        let listed = try await CLIProcess.run(["list", "--state", "state"], in: scratch.url)
        #expect(listed.stdout.contains("busy.bin"), "the 503 left the store: \(listed)")

        // The server is back.
        server.register(.bytes(busy), at: "/busy.bin")
        let resumed = try await CLIProcess.run(["resume", "--state", "state"], in: scratch.url)
        let file = scratch.url.appendingPathComponent("out/busy.bin")
        let present = FileManager.default.fileExists(atPath: file.path)
        #expect(
            present || resumed.exitCode != 0,
            "resume --state exits 0 while busy.bin, which only met a 503, was never downloaded: \(resumed)")
        if present { try expectSameBytes(Data(contentsOf: file), Data(busy)) }
    }

    /// A full disk is temporary (docs/cli.md, exit status 75: "a full disk or a file-size limit ... free space, then
    /// resumable resume"), and `get URL` says so. The same download in a batch ends with exit 1, the status of a
    /// failure for good: the batch's verdict reads `isTransient`, which a full disk is not, instead of the exit status
    /// the error maps to.
    @Test("A full disk in a batch: exit 75 as for get URL, and resume --state finishes the file once there is room")
    func fullDiskInABatch() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let content = Resource.generatedBytes(seed: 613, range: 0..<(1 << 20))
        server.register(.bytes(content), at: "/big.bin")
        let url = server.url(for: "/big.bin").absoluteString
        try Data((url + "\n").utf8).write(to: scratch.file("list.txt"))

        // No file may grow past 64 KiB: the records fit, the download does not.
        let single = try await CLIProcess.start(["get", url, "-o", "single.bin"], in: scratch.url, fileSizeLimit: 128)
            .finish()
        #expect(single.exitCode == 75, "get URL on a full disk: \(single)")
        let batch = try await CLIProcess.start(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state"], in: scratch.url, fileSizeLimit: 128
        ).finish()
        #expect(batch.exitCode == 75, "the same download in a batch, on the same full disk: \(batch)")

        let resumed = try await CLIProcess.run(["resume", "--state", "state"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        let file = scratch.url.appendingPathComponent("out/big.bin")
        try expectSameBytes(Data(contentsOf: file), Data(content))
    }
}
