import Foundation
import LoopbackServer
import Testing

/// A crash right after a finished file was moved to a free name (`name (1).ext`, because `name.ext` was taken).
///
/// The last token, written just before the move, names the free name (`finalName`): a resume after the crash finds the
/// finished file there and reports it finished. Before, it looked under the taken name only, found another file, and
/// asked for an output path (`destinationRequired`); a queue, which passes one, downloaded the file a second time. Had
/// the other file had the same length, the finished download would have been reported at the other file's path.
@Suite("A crash after the move into a free name")
struct FreeNameCrashTests {
    @Test("get, kill -9 right after the move to 'a (1).bin', then resume: already finished, nothing fetched again")
    func crashAfterMoveToFreeName() async throws {
        let scratch = try ScratchDirectory()
        let output = try scratch.subdirectory("out")
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let bytes = Resource.generatedBytes(seed: 93, range: 0..<300_000)
        server.register(.bytes(bytes), at: "/a.bin")
        // Another file under the name the server suggests, of the same length: only the recorded name tells them
        // apart.
        let theirs = Data(Resource.generatedBytes(seed: 94, range: 0..<300_000))
        let taken = output.appendingPathComponent("a.bin")
        try theirs.write(to: taken)
        let token = scratch.file("a.token.json")
        let arguments = [
            "get", server.url(for: "/a.bin").absoluteString, "-o", output.path + "/", "--token", token.path, "-q",
            "--retries", "0", "--transport", "libcurl",
        ]

        // The step that moves the file into place: `rename` (or `link`, where renameat2 is missing) to the free name.
        // A dry run says which; the crash then matches the step itself, not its number (which depends on how many
        // checkpoints the timing allowed).
        let log = scratch.file("steps.log")
        let dry = try await CLIProcess.run(arguments, in: scratch.url, environment: ["RESUMABLE_STEP_LOG": log.path])
        try #require(dry.exitCode == 0, "\(dry)")
        let freeName = output.appendingPathComponent("a (1).bin")
        try expectSameBytes(Data(contentsOf: freeName), Data(bytes))
        let steps = try String(contentsOf: log, encoding: .utf8).split(separator: "\n").map {
            $0.split(separator: " ", maxSplits: 2).map(String.init)
        }
        let move = try #require(
            steps.first { $0.count == 3 && ($0[1] == "rename" || $0[1] == "link") && $0[2] == freeName.path },
            "no step moved the file to \(freeName.path): \(steps)")
        try FileManager.default.removeItem(at: freeName)
        let requestsBefore = server.requests(for: "/a.bin").count

        // The same download, killed right after that step.
        let crashed = try await CLIProcess.run(
            arguments, in: scratch.url,
            environment: ["RESUMABLE_CRASH_AFTER_STEP_MATCHING": move[1] + " " + move[2]])
        try #require(crashed.exitCode == 137, "\(crashed)")
        try expectSameBytes(Data(contentsOf: freeName), Data(bytes))
        #expect(FileManager.default.fileExists(atPath: token.path), "the last token should outlive the crash")
        let requestsAfterCrash = server.requests(for: "/a.bin").count
        #expect(requestsAfterCrash == requestsBefore + 1)

        let inspected = try await CLIProcess.run(["inspect", token.path], in: scratch.url)
        #expect(inspected.stdout.contains("  final name:   a (1).bin"), "\(inspected)")

        let resumed = try await CLIProcess.run(
            ["resume", token.path, "--json", "--retries", "0", "--transport", "libcurl"], in: scratch.url)
        #expect(server.requests(for: "/a.bin").count == requestsAfterCrash, "the finished file was fetched again")
        #expect(resumed.exitCode == 65, "\(resumed)")
        #expect(resumed.stdout.contains("\"tokenGone\""), "\(resumed)")
        #expect(resumed.stdout.contains("a (1).bin"), "the resume did not name where the file is: \(resumed)")
        try expectSameBytes(Data(contentsOf: taken), theirs, "the other file changed")
        try expectSameBytes(Data(contentsOf: freeName), Data(bytes))
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: output.path).sorted() == ["a (1).bin", "a.bin"],
            "a second copy appeared")
    }
}
