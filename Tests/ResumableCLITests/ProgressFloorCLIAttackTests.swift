import Foundation
import Testing

@testable import ResumableCLI

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// docs/cli.md, `serve --drop-after <bytes>`: "Close every connection after sending this many body bytes ... a flaky
/// server, to see how an application copes. Clients that resume (like `resumable get`) still finish, one range at a
/// time." Since commits 6957774/26133fd a failed attempt counts as progress only when it alone brought 64 KiB (while a
/// MiB or more is missing): with `--drop-after 32768` every attempt brings 32 KiB, none counts, and `get` gives up
/// after its five retries (exit 75) on a 2 MB file it used to finish.
@Suite("Attack (CLI): the progress floor against serve --drop-after")
struct ProgressFloorCLIAttackTests {
    @Test("serve --drop-after 32768: get still finishes a 2 MB file one range at a time, with the default retries")
    func getFinishesThroughSmallDrops() async throws {
        let scratch = try ScratchDirectory()
        let root = try scratch.subdirectory("root")
        let content = Data((0..<2_000_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) })
        try content.write(to: root.appendingPathComponent("flaky.bin"))
        _ = try scratch.subdirectory("downloads")

        let server = try CLIProcess(["serve", "root", "--drop-after", "32768"], in: scratch.url)
        let listed = try await eventually { server.stdoutSoFar.split(separator: "\n").count >= 2 }
        #expect(listed, "\(server.stdoutSoFar) \(server.stderrSoFar)")
        let lines = server.stdoutSoFar.split(separator: "\n").map(String.init)
        let fileLine = try #require(lines.first { $0.contains("flaky.bin") })
        let url = String(fileLine.split(separator: "\t")[0])

        let fetched = try await CLIProcess.run(["get", url, "-o", "downloads/", "-q"], in: scratch.url)
        #expect(fetched.exitCode == 0, "\(fetched)")
        let saved = scratch.url.appendingPathComponent("downloads/flaky.bin")
        expectSameBytes((try? Data(contentsOf: saved)), content)

        server.send(SIGINT)
        let stopped = try await server.finish()
        #expect(stopped.exitCode == 0, "\(stopped)")
    }
}
