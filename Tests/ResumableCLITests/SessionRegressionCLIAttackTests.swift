import Foundation
import LoopbackServer
import Testing

/// Adversarial review of this session's finishing rules (`197add2..`) through the command line: the `finalName` a
/// last token announces before a move to a free name.
@Suite("Session regressions under attack: the command line")
struct SessionRegressionCLIAttackTests {
    /// Rule broken: 4 (no giving up wrongly), 2 (nothing downloaded is lost without need), 3 (no traps: a file the
    /// tool left makes the next run fail).
    ///
    /// Sequence: `out/.env` exists (the user's). `resumable get URL -o out/.env --token T`, an exact output file
    /// that is a dot file: the download goes to the free name `.env (1)` and exits 0. The same command again.
    ///
    /// Observed: the first, successful run leaves its token `T` behind (with `"finalName": ".env (1)"`), which no
    /// successful `get` does. The second run downloads the whole file, then fails (exit 65, "cannot write the resume
    /// token to T: resume token field 'finalName' is not a safe file name"), leaving a whole
    /// `out/.resumable-….partial` that no token names. Without `--token` each successful run leaves another
    /// `out/.env.N.resumable.json`. The token the tool wrote before the move announces `finalName: ".env (1)"`; its
    /// own reader (`ResumeToken` decoding, which demands `SuggestedFilename.sanitize(finalName) == finalName`,
    /// false for a leading dot) refuses it, so the removal after success (which reads the token to check it is this
    /// download's) keeps it, and the next write over `T` refuses to replace a file that is not a token.
    @Test(
        "get -o an existing dot file twice with the same --token: both succeed and no token is left",
        arguments: ["libcurl", "urlsession"])
    func dotFileFreeNameLeavesNoToken(transport: String) async throws {
        let scratch = try ScratchDirectory()
        let output = try scratch.subdirectory("out")
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let bytes = Resource.generatedBytes(seed: 4512, range: 0..<300_000)
        server.register(.bytes(bytes), at: "/env")
        let theirs = Data("SECRET=mine\n".utf8)
        let taken = output.appendingPathComponent(".env")
        try theirs.write(to: taken)
        let token = scratch.file("env.token.json")
        let arguments = [
            "get", server.url(for: "/env").absoluteString, "-o", taken.path, "--token", token.path, "-q",
            "--retries", "0", "--transport", transport,
        ]

        let first = try await CLIProcess.run(arguments, in: scratch.url)
        try #require(first.exitCode == 0, "\(first)")
        try expectSameBytes(Data(contentsOf: output.appendingPathComponent(".env (1)")), Data(bytes))
        #expect(!FileManager.default.fileExists(atPath: token.path), "a successful get left its token behind")

        let second = try await CLIProcess.run(arguments, in: scratch.url)
        #expect(second.exitCode == 0, "\(second)")
        let names = try FileManager.default.contentsOfDirectory(atPath: output.path).sorted()
        #expect(names == [".env", ".env (1)", ".env (2)"], "\(names)")
        try expectSameBytes(Data(contentsOf: taken), theirs, "the user's file changed")
    }

    /// Rule broken: 2 (nothing downloaded is lost without need) and 4 (no giving up wrongly).
    ///
    /// Sequence: `resumable get URL -o out/.env --token T` (an exact output file, a dot file) while `out/.env`
    /// already exists (the user's): the finished file goes to the free name `.env (1)`, announced in the last token
    /// (`finalName`). `kill -9` right after the move (`RESUMABLE_CRASH_AFTER_STEP_MATCHING`, found by a dry run, as
    /// `FreeNameCrashTests` does). Then `resumable inspect T` and `resumable resume T`.
    ///
    /// Observed: the token the tool itself wrote cannot be read back: `inspect` and `resume` refuse it with
    /// `invalidToken` ("finalName is not a safe file name: \".env (1)\""), so the resume never says the file is
    /// finished nor where it is. A crash one step earlier (after the announcing token write, before the move)
    /// leaves the whole temporary file with the same unreadable token: the bytes can only be downloaded again. The
    /// Finisher numbers the destination's own name (`SuggestedFilename.available`), which `-o` takes as typed, and
    /// `ResumeToken`'s decoder demands `SuggestedFilename.sanitize(finalName) == finalName` (leading dots, trailing
    /// dots or spaces, a backslash or a control character all fail it).
    @Test(
        "get -o a dot file that exists, kill -9 after the move to '.env (1)': inspect and resume read the token",
        arguments: ["libcurl", "urlsession"])
    func dotFileFreeNameTokenReadsBack(transport: String) async throws {
        let scratch = try ScratchDirectory()
        let output = try scratch.subdirectory("out")
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let bytes = Resource.generatedBytes(seed: 4511, range: 0..<300_000)
        server.register(.bytes(bytes), at: "/env")
        let theirs = Data("SECRET=mine\n".utf8)
        let taken = output.appendingPathComponent(".env")
        try theirs.write(to: taken)
        let token = scratch.file("env.token.json")
        let arguments = [
            "get", server.url(for: "/env").absoluteString, "-o", taken.path, "--token", token.path, "-q",
            "--retries", "0", "--transport", transport,
        ]

        let log = scratch.file("steps.log")
        let dry = try await CLIProcess.run(arguments, in: scratch.url, environment: ["RESUMABLE_STEP_LOG": log.path])
        try #require(dry.exitCode == 0, "\(dry)")
        let freeName = output.appendingPathComponent(".env (1)")
        try expectSameBytes(Data(contentsOf: freeName), Data(bytes))
        let steps = try String(contentsOf: log, encoding: .utf8).split(separator: "\n").map {
            $0.split(separator: " ", maxSplits: 2).map(String.init)
        }
        let move = try #require(
            steps.first { $0.count == 3 && ($0[1] == "rename" || $0[1] == "link") && $0[2] == freeName.path },
            "no step moved the file to \(freeName.path): \(steps)")
        try FileManager.default.removeItem(at: freeName)
        // A finished `get` leaves its token behind here (see `dotFileFreeNameLeavesNoToken`): not this test's point.
        try? FileManager.default.removeItem(at: token)
        let requestsBefore = server.requests(for: "/env").count

        let crashed = try await CLIProcess.run(
            arguments, in: scratch.url,
            environment: ["RESUMABLE_CRASH_AFTER_STEP_MATCHING": move[1] + " " + move[2]])
        try #require(crashed.exitCode == 137, "\(crashed)")
        try #require(FileManager.default.fileExists(atPath: token.path), "the last token should outlive the crash")
        let requestsAfterCrash = server.requests(for: "/env").count
        #expect(requestsAfterCrash == requestsBefore + 1)

        // `inspect` exits as `resume` would: 65, "already finished" (docs/cli.md), naming the free name.
        let inspected = try await CLIProcess.run(["inspect", token.path], in: scratch.url)
        #expect(inspected.exitCode == 65, "\(inspected)")
        #expect(!inspected.stderr.contains("invalid"), "the tool cannot read its own last token: \(inspected)")
        #expect(inspected.stdout.contains("final name:   .env (1)"), "\(inspected)")

        let resumed = try await CLIProcess.run(
            ["resume", token.path, "--json", "--retries", "0", "--transport", transport], in: scratch.url)
        #expect(!resumed.stdout.contains("invalidToken"), "the tool refused its own last token: \(resumed)")
        #expect(resumed.stdout.contains(".env (1)"), "the resume did not name where the file is: \(resumed)")
        #expect(server.requests(for: "/env").count == requestsAfterCrash, "the finished file was fetched again")
        try expectSameBytes(Data(contentsOf: taken), theirs, "the user's file changed")
        try expectSameBytes(Data(contentsOf: freeName), Data(bytes))
    }
}
