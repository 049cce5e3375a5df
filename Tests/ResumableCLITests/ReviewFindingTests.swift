import Foundation
import LoopbackServer
import Resumable
import Testing

/// Regression tests for what the adversarial review of issue #8 proved through the built binary.
@Suite("findings of the adversarial review")
struct ReviewFindingTests {
    @Test("A token path that is also the destination: the finished file survives the token's removal")
    func tokenPathIsTheDestination() async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        let out = try scratch.subdirectory("out")
        let result = try await CLIProcess.run(
            [
                "get", served.url, "-o", out.path + "/", "--token", out.appendingPathComponent("file.bin").path,
                "--overwrite", "-q",
            ],
            in: scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        try expectSameBytes(Data(contentsOf: out.appendingPathComponent("file.bin")), served.bytes)
    }

    @Test("A second download never takes over the token file of one that is running")
    func runningDownloadKeepsItsTokenFile() async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        let tokenURL = scratch.file("file.bin.resumable.json")
        // Download A runs, held after its first bytes, with its token at the default path.
        let gate = served.holdBody(after: 50_000)
        async let first = CLIProcess.run(["get", served.url, "-q"], in: scratch.url)
        let started = try await trickle(gate, bodyLength: served.length, step: 0) {
            tokenOffset(at: tokenURL) != nil
        }
        #expect(started)
        let tokenA = try Data(contentsOf: tokenURL)
        // Download B of the same file into the same place must not take A's token file over.
        served.setBehavior(.normal)
        let second = try await CLIProcess.run(["get", served.url, "-q"], in: scratch.url)
        #expect(second.exitCode == 75, "\(second)")
        #expect(second.stderr.contains("in use"), "\(second.stderr)")
        #expect(try Data(contentsOf: tokenURL) == tokenA, "A's token is untouched")
        gate.open()
        let finished = try await first
        #expect(finished.exitCode == 0, "\(finished)")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
    }

    @Test("A directory where the temporary file should be: inspect and resume both exit 65")
    func directoryAsTemporaryFile() async throws {
        let served = try ServedFile(behavior: Behavior(dropAfterBytes: 100_000))
        let scratch = try ScratchDirectory()
        let first = try await CLIProcess.run(["get", served.url, "--retries", "0", "-q"], in: scratch.url)
        try #require(first.exitCode == 75, "\(first)")
        let tokenURL = scratch.file("file.bin.resumable.json")
        let token = try ResumeToken(contentsOf: tokenURL)
        try FileManager.default.removeItem(atPath: token.tempPath)
        try FileManager.default.createDirectory(atPath: token.tempPath, withIntermediateDirectories: false)
        let inspected = try await CLIProcess.run(["inspect", tokenURL.path], in: scratch.url)
        let resumed = try await CLIProcess.run(["resume", tokenURL.path, "-q"], in: scratch.url)
        #expect(inspected.exitCode == 65, "\(inspected)")
        #expect(resumed.exitCode == 65, "\(resumed)")
        #expect(resumed.stderr.contains("not a regular file"), "\(resumed.stderr)")
    }

    @Test("A password in the URL is sent but never printed")
    func passwordNeverPrinted() async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        let url = served.url.replacingOccurrences(of: "http://", with: "http://alice:SECRETPW@")
        let result = try await CLIProcess.run(["get", url], in: scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        #expect(!result.stderr.contains("SECRETPW"), "\(result.stderr)")
        #expect(!result.stdout.contains("SECRETPW"))
    }
}
