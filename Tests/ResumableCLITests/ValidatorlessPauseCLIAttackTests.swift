import Foundation
import LoopbackServer
import Testing

/// Adversarial review (helper 87) of 07bbfbd, through the CLI: `get --connections 4` learns that the server's 206s
/// carry no validator (`partialsNeedValidators`), restarts in one piece, is paused (SIGINT, exit 130), and
/// `resume <token>` in a new process joins the validator-less 206 of another version.
///
/// The server: a ``ValidatorlessCacheServer`` whose second 200 (the restart) holds after 1 MiB until the test
/// releases it.
@Suite("Attack (CLI): a pause forgets that the server's 206s need validators")
struct ValidatorlessPauseCLIAttackTests {
    /// Rule 1. Observed: `get` reports "Restarting from the beginning", holds 1 MiB of version 1, exits 130 on
    /// SIGINT; `resume` (default connections: one, as less than 16 MiB is missing) continues at byte 1048576 and exits 0 with version 1 up to 1 MiB and version 2 after.
    /// Cause: `ResumeStateMachine.partialsNeedValidators` (`Sources/Resumable/Resume/ResumeStateMachine.swift:114`)
    /// is in memory only; the token file does not carry it.
    @Test("get --connections 4, SIGINT after the restart, resume: never a file of two versions")
    func pauseThenResume() async throws {
        let server = try ValidatorlessCacheServer(
            seeds: (8792, 8793), etag: "\"cli-pause-v1\"", holdingSecondWhole: true)
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let token = directory.url.appendingPathComponent("t.json").path
        let url = server.url.absoluteString
        let get = try await CLIProcess.start(
            ["get", url, "-o", directory.url.path, "--connections", "4", "--token", token], in: directory.url)
        let held = try await eventually {
            let names = try FileManager.default.contentsOfDirectory(atPath: directory.url.path)
            let sizes = names.filter { $0.hasSuffix(".partial") }.compactMap {
                try? FileManager.default.attributesOfItem(atPath: directory.url.appendingPathComponent($0).path)[.size]
                    as? Int64
            }
            return get.stderrSoFar.contains("Restarting from the beginning") && sizes.contains(1 << 20)
        }
        #expect(held, "stderr: \(get.stderrSoFar)")
        get.send(SIGINT)
        let paused = try await get.finish()
        server.release()
        #expect(paused.exitCode == 130, "\(paused)")
        let resumed = try await CLIProcess.run(["resume", token], in: directory.url)
        let file = directory.url.appendingPathComponent("file.bin")
        if resumed.exitCode == 0 {
            let splice = server.splice(in: Array(try Data(contentsOf: file)))
            #expect(splice == nil, "spliced: \(splice ?? ""); \(resumed)")
        }
    }
}
