import Foundation
import LoopbackServer
import Resumable
import Testing

/// Adversarial review (helper 84): the options `resume --state DIR` accepts, and whether it honours them.
@Suite("resume --state: the options it accepts")
struct ResumeStateOptionsAttackTests {
    /// Rule: `docs/cli.md`: `--sha256 <hex>` is "the SHA-256 the finished file must have … on a mismatch the partial
    /// file is deleted, no token is kept, and the exit status is 1"; a batch exits "0 only when every file of the batch
    /// is complete (and verified …)". `resume --state` refuses the options it cannot apply to a whole batch (a token,
    /// `--url`, `-o`: exit 64).
    ///
    /// Sequence: `get -i list.txt -o out/ --state state --retries 0`, one 300,000-byte entry; the server drops the
    /// first connection after 100,000 bytes (a one-shot behaviour), so the run exits 75 with the download's record and
    /// bytes in the store. Then `resume --state state --sha256 <64 zeros>`: a digest the file cannot have.
    ///
    /// Observed: exit 0, `1 finished`, and `out/a.bin` saved: the `--sha256` given on the command line is accepted
    /// and silently ignored. Cause: `BatchRunner.run(total:prepare:)`
    /// (`Sources/ResumableCLI/Batch/BatchRunner.swift:141`) sets `download.expectedSHA256 = nil` for every batch, since
    /// `get -i` applies `--sha256` through `add`; `runStore()` only restores records, so on `resume --state` the option
    /// reaches nothing, and `ResumeCommand.init` (`Sources/ResumableCLI/Commands/ResumeCommand.swift:54`) does not
    /// refuse it either.
    @Test("resume --state --sha256 with a digest the file does not have does not exit 0 with the file saved")
    func resumeStateIgnoresSHA256() async throws {
        let scratch = try ScratchDirectory()
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let bytes = Resource.generatedBytes(seed: 8485, range: 0..<300_000)
        server.register(.bytes(bytes), at: "/a.bin")
        server.enqueue(behavior: Behavior(dropAfterBytes: 100_000), for: "/a.bin")
        try Data((server.url(for: "/a.bin").absoluteString + "\n").utf8).write(to: scratch.file("list.txt"))

        let first = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "--retries", "0", "-q"], in: scratch.url)
        try #require(first.exitCode == 75, "\(first)")
        try #require(
            !TodayFixesCLIAttackTests.records(in: scratch.url.appendingPathComponent("state")).isEmpty,
            "no record left to resume")

        let wrong = String(repeating: "0", count: 64)
        let resumed = try await CLIProcess.run(
            ["resume", "--state", "state", "--sha256", wrong, "-q"], in: scratch.url)
        let saved = scratch.url.appendingPathComponent("out/a.bin")
        let savedBytes = try? Data(contentsOf: saved)
        #expect(
            resumed.exitCode == 64,
            "resume --state accepted --sha256 \(wrong) and exited 0 with a file whose SHA-256 differs: \(resumed)")
        #expect(savedBytes == nil, "the file was saved although it does not have the SHA-256 given: \(resumed)")
    }

    /// `get -i` with `--token`: one token file cannot serve a list's downloads (each keeps its token in the store).
    /// It was accepted and ignored; it is a usage error before anything is read or written.
    @Test("get -i refuses --token, and nothing is created")
    func listRefusesToken() async throws {
        let scratch = try ScratchDirectory()
        try Data("http://127.0.0.1:9/a.bin\n".utf8).write(to: scratch.file("list.txt"))
        let result = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "out/", "--token", "t.json", "-q"], in: scratch.url)
        #expect(result.exitCode == 64, "\(result)")
        #expect(result.stderr.contains("no --token"), "\(result)")
        #expect(!FileManager.default.fileExists(atPath: scratch.file("out").path))
        #expect(!FileManager.default.fileExists(atPath: scratch.file("t.json").path))
    }
}
