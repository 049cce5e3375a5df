import Foundation
import LoopbackServer
import Resumable
import Testing

/// `--max-time` and `--connect-timeout`.
@Suite("Timeouts")
struct TimeoutTests {
    private static let length: Int64 = 4 << 20
    private static let heldAt: Int64 = 1 << 20

    @Test("--max-time stops a stalled download with a token (exit 75), and resume finishes it")
    func maxTime() async throws {
        let served = try ServedFile(length: Self.length)
        // Never released before the deadline: only --max-time can end the first run.
        let gate = served.holdBody(after: Self.heldAt)
        let scratch = try ScratchDirectory()
        let first = try await CLIProcess.run(
            ["get", served.url, "--max-time", "1", "--timeout", "3600", "--json", "--connections", "1"], in: scratch.url
        )
        #expect(first.exitCode == 75, "\(first)")
        let object = try jsonObject(first.stdout)
        let error = try #require(object["error"] as? [String: Any])
        #expect(error["code"] as? String == "timedOut")
        #expect((error["message"] as? String)?.contains("deadline") == true, "\(error)")
        let tokenURL = scratch.file("file.bin.resumable.json")
        let token = try ResumeToken(contentsOf: tokenURL)
        #expect(token.offset == Self.heldAt)
        // No retry was made after the deadline: one request only.
        #expect(served.server.requests(for: served.path).count == 1)

        gate.open()
        served.setBehavior(.normal)
        let second = try await CLIProcess.run(["resume", tokenURL.path, "--json"], in: scratch.url)
        #expect(second.exitCode == 0, "\(second)")
        #expect(try jsonObject(second.stdout)["resumedFrom"] as? NSNumber == NSNumber(value: Self.heldAt))
    }

    @Test("Timeout options need a positive number of seconds", arguments: ["--max-time", "--connect-timeout"])
    func badValues(option: String) async throws {
        let scratch = try ScratchDirectory()
        for value in ["0", "-1", "abc", "1e9"] {
            let result = try await CLIProcess.run(["get", "http://127.0.0.1:9/x", option, value], in: scratch.url)
            #expect(result.exitCode == 64, "\(option) \(value): \(result)")
            #expect(result.stderr.contains(option), "\(result)")
        }
    }
}
