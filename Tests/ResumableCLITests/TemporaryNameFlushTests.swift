import Foundation
import LoopbackServer
import Testing

/// The name of a temporary file is flushed before the first token that counts on its bytes (`PartialFile.synchronize`).
///
/// `fdatasync` makes a file's bytes durable, not its name: on a file system whose flush of one file does not commit the
/// creation of another (btrfs, for one), a token written after it could survive a power loss that the temporary
/// file's name did not, and the bytes it lists would be lost. The step log (`RESUMABLE_STEP_LOG`, `DurableSteps`)
/// shows the order of the steps that make things durable.
@Suite("The temporary file's name is on disk before a token counts on its bytes")
struct TemporaryNameFlushTests {
    @Test(
        "get: the temporary file's directory is flushed once, after its first flush and before the token of every byte")
    func nameFlushedBeforeToken() async throws {
        let scratch = try ScratchDirectory()
        let output = try scratch.subdirectory("out")
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let bytes = Resource.generatedBytes(seed: 95, range: 0..<300_000)
        server.register(.bytes(bytes), at: "/a.bin")
        let token = scratch.file("a.token.json")
        let log = scratch.file("steps.log")
        let run = try await CLIProcess.run(
            [
                "get", server.url(for: "/a.bin").absoluteString, "-o", output.path + "/", "--token", token.path, "-q",
                "--retries", "0",
            ],
            in: scratch.url, environment: ["RESUMABLE_STEP_LOG": log.path])
        try #require(run.exitCode == 0, "\(run)")
        try expectSameBytes(Data(contentsOf: output.appendingPathComponent("a.bin")), Data(bytes))

        let steps = try String(contentsOf: log, encoding: .utf8).split(separator: "\n").map {
            $0.split(separator: " ", maxSplits: 2).map(String.init)
        }
        let temporary = try #require(steps.first { $0.count == 3 && $0[1] == "create" }?[2], "\(steps)")
        let firstFlush = try #require(
            steps.firstIndex { $0.count == 3 && $0[1] == "flush" && $0[2] == temporary }, "\(steps)")
        let directory = (temporary as NSString).deletingLastPathComponent
        let nameFlushes = steps.indices.filter { steps[$0].count == 3 && steps[$0][1] == "flush-directory" }
            .filter { steps[$0][2] == directory }
        // Once is enough: later flushes of the same file do not flush its directory again.
        let nameFlush = try #require(nameFlushes.count == 1 ? nameFlushes.first : nil, "\(steps)")
        #expect(nameFlush > firstFlush, "\(steps)")
        // The token written just before the move lists every byte: it comes after the name's flush. (The first token,
        // which lists no byte, may be written by another thread at any time.)
        let move = try #require(steps.firstIndex { $0.count == 3 && $0[1] == "rename" }, "\(steps)")
        let wholeToken = try #require(steps[..<move].lastIndex { $0.count == 3 && $0[1] == "token-write" }, "\(steps)")
        #expect(nameFlush < wholeToken, "\(steps)")
    }
}
