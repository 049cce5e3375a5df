import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review, through the real binary, of the store's `claims` file (58f68bb, a48e01a, 9338091) and of
/// the claim a failed move gives back (f53acf1).
@Suite("Claims under attack: the command line")
struct ClaimsCLIAttackTests {
    /// The states written in the store's records (`queued`, `paused`, `failed`).
    static func recordStates(in state: URL) -> [String] {
        let tasks = state.appendingPathComponent("tasks")
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: tasks.path)) ?? []).filter {
            $0.hasSuffix(".json")
        }
        return names.compactMap { name in
            guard let data = FileManager.default.contents(atPath: tasks.appendingPathComponent(name).path),
                let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
            else { return nil }
            return object["state"] as? String
        }
    }

    /// Rule broken: `--overwrite` "replaces files that were there before; never one this batch saved, also before
    /// an interruption or a crash (`resume --state` knows them: the store's `claims` file)" (`docs/cli.md`); rule
    /// 1: nothing the batch saved is replaced or lost.
    ///
    /// Sequence: a list of `/a/x.bin` (30,000 bytes) and `/b/x.bin` (40,000 bytes, held after 10,000), both saved
    /// as `x.bin`; `out/x.bin` is a directory when the batch starts. `get -i list.txt -j 2 -o out/ --state state
    /// --overwrite`: `/a/x.bin` is complete first; its rename over the directory fails, so it fails with its token
    /// (its record stays, `failed`). The user removes the directory; `/b/x.bin` goes on and is saved as
    /// `out/x.bin`. The batch ends ("1 finished, 1 failed"). Then `resume --state state --overwrite` retries the
    /// failed download.
    ///
    /// Observed: the retried `/a/x.bin` is renamed over `out/x.bin`: the file the batch saved from `/b/x.bin` is
    /// gone, and the run reports success. `claims` holds `A out/x.bin` (appended before A's failed move) and then
    /// `B out/x.bin`; A's claim was given back in memory only, and `FinalPathClaims.restore` keeps the first claim
    /// of each path, so after the restart the name is A's again.
    @Test("resume --state --overwrite of a download whose move failed keeps the file saved under its name since")
    func failedMoveThenResumeReplacesSavedFile() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let first = Resource.generatedBytes(seed: 4411, range: 0..<30_000)
        let second = Resource.generatedBytes(seed: 4412, range: 0..<40_000)
        server.register(.bytes(first), at: "/a/x.bin")
        server.register(.bytes(second), at: "/b/x.bin")
        let gate = BodyGate(holdingAfter: 10_000)
        server.enqueue(behavior: Behavior(gate: gate), for: "/b/x.bin")
        let list = server.url(for: "/b/x.bin").absoluteString + "\n" + server.url(for: "/a/x.bin").absoluteString + "\n"
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let out = scratch.url.appendingPathComponent("out")
        let saved = out.appendingPathComponent("x.bin")
        try FileManager.default.createDirectory(at: saved, withIntermediateDirectories: true)
        let state = scratch.url.appendingPathComponent("state")

        let process = try await CLIProcess.start(
            ["get", "-i", "list.txt", "-j", "2", "-o", "out/", "--state", "state", "--overwrite"], in: scratch.url)
        #expect(await gate.waitUntilHeld(count: 1, timeout: CLIProcess.deadline), "\(gate)")
        let failed = try await eventually { Self.recordStates(in: state).contains("failed") }
        try #require(failed, "the move over the directory did not fail: \(process.stderrSoFar)")
        try FileManager.default.removeItem(at: saved)
        gate.open()
        let batch = try await process.finish()
        try #require(batch.signal == nil, "\(batch)")
        try requireSameBytes((try? Data(contentsOf: saved)), Data(second), "the second file was not saved: \(batch)")

        let resumed = try await CLIProcess.run(["resume", "--state", "state", "--overwrite", "-q"], in: scratch.url)
        #expect(resumed.signal == nil, "\(resumed)")
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: out.path)) ?? []).filter {
            !$0.hasPrefix(".")
        }
        let contents = files.compactMap { try? Data(contentsOf: out.appendingPathComponent($0)) }
        #expect(
            contents.contains(Data(second)),
            "the file the batch saved from /b/x.bin was replaced: \(files.sorted()) \(resumed)")
        #expect(contents.contains(Data(first)), "\(files.sorted()) \(resumed)")
    }
}
