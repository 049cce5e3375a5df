import Foundation
import LoopbackServer
import Resumable
import Testing

/// Adversarial review of the numbered token names of `get` (ad8fbf9) through the `resumable` binary.
@Suite("Latest fixes attack through the CLI: numbered token names")
struct LatestFixesCLIAttackTests {
    /// Rule broken: a finished file is exactly the server's bytes, or there is none; nothing downloaded is lost.
    ///
    /// `TokenFile.write` walks `name.resumable.json`, `name.2.resumable.json`, … while the file there *is a token*
    /// of another unfinished download, and writes its token over the first path that is not one
    /// (`try? ResumeToken(contentsOf:)` fails on any other file, and `AtomicFile.write` replaces it). A server's
    /// suggested name is kept as long as it is a plain name, `a.bin.2.resumable.json` included. So a finished
    /// download of that name (from any server) is replaced by the token of a later `get` of `a.bin` run while an
    /// earlier one is unfinished, and when that `get` succeeds, `endCompleted` removes "its" token: the finished
    /// file is gone. The same holds for `a.bin.resumable.json` with no unfinished download at all.
    @Test(
        "get: a finished file whose name is where a token would go is never overwritten by that token",
        arguments: [("a.bin.2.resumable.json", true), ("a.bin.resumable.json", false)])
    func finishedFileAtTokenPath(finishedName: String, earlierUnfinished: Bool) async throws {
        let scratch = try ScratchDirectory()
        let output = try scratch.subdirectory("out")
        let other = try LoopbackServer()
        defer { other.shutdown() }
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let finishedBytes = Resource.generatedBytes(seed: 81, range: 0..<20_000)
        other.register(
            .bytes(finishedBytes, contentDisposition: "attachment; filename=\"\(finishedName)\""), at: "/report")
        let wanted = Resource.generatedBytes(seed: 82, range: 0..<200_000)
        server.register(.bytes(wanted), at: "/a.bin")
        let arguments = ["-o", output.path + "/", "--retries", "0", "-q", "--transport", "libcurl"]

        let finished = try await CLIProcess.run(
            ["get", other.url(for: "/report").absoluteString] + arguments, in: scratch.url)
        try #require(finished.exitCode == 0, "\(finished)")
        let finishedURL = output.appendingPathComponent(finishedName)
        try requireSameBytes(Data(contentsOf: finishedURL), Data(finishedBytes))

        if earlierUnfinished {
            server.enqueue(behavior: Behavior(dropAfterBytes: 50_000), for: "/a.bin")
            let cut = try await CLIProcess.run(
                ["get", server.url(for: "/a.bin").absoluteString] + arguments, in: scratch.url)
            try #require(cut.exitCode == 75, "\(cut)")
            try #require(
                FileManager.default.fileExists(atPath: output.appendingPathComponent("a.bin.resumable.json").path))
        }
        let again = try await CLIProcess.run(
            ["get", server.url(for: "/a.bin").absoluteString] + arguments, in: scratch.url)
        #expect(again.exitCode == 0, "\(again)")
        #expect(
            (try? Data(contentsOf: finishedURL)) == Data(finishedBytes),
            "the finished download '\(finishedName)' was replaced by a token, then removed: \(scratch.contents(of: output))"
        )
    }
}
