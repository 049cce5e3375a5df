import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Attacks on the last hour's CLI changes (2997d49: the token of the last flush that succeeded is left and
/// reported when a download hands out none).
@Suite("Late-session attacks on the CLI")
struct LateSessionCLIAttackTests {
    private static let length: Int64 = 4 << 20
    private static let patient = ["--timeout", "3600", "--connections", "1"]

    enum Ending: String, CaseIterable, Sendable {
        /// SIGINT while the resumed response is held: the pause's flush fails.
        case interrupt
        /// The resumed response flows: the first checkpoint's flush fails, and the download with it.
        case failure
    }

    /// `resume TOKEN` on a disk whose flushes fail from the start: the run writes no checkpoint of its own, so
    /// `TokenFile.end(leaving: nil)` (which only reports a token "this run wrote") reports nothing, although the token
    /// file it was given stays on disk, names the kept partial file and resumes fine. The CLI says "nothing to
    /// resume" (SIGINT) or gives no resume command (failure), and `--json` reports `token: null`: exactly what
    /// 2997d49 set out to stop, for the run that resumed instead of the run that started.
    @Test(
        "A resume whose flushes fail from the start reports the token file it was given, which stays and resumes",
        arguments: Ending.allCases)
    func resumedTokenIsReportedWhenFlushesFail(ending: Ending) async throws {
        let served = try ServedFile(length: Self.length)
        let gate = served.holdBody(after: 64 * 1024)
        defer { gate.open() }
        let scratch = try ScratchDirectory()
        let markers = try TemporaryDirectory()
        let marker = markers.url.appendingPathComponent("fail-flushes")
        let tokenURL = scratch.file("file.bin.resumable.json")
        let first = try CLIProcess(
            ["get", served.url] + Self.patient, in: scratch.url,
            environment: ["RESUMABLE_FAIL_FLUSHES_WHILE": marker.path])
        let checkpointed = try await trickle(gate, bodyLength: Self.length) { (tokenOffset(at: tokenURL) ?? 0) > 0 }
        try #require(checkpointed, "\(gate) \(first.stderrSoFar)")
        first.send(SIGINT)
        let paused = try await first.finish()
        try #require(paused.exitCode == 130, "\(paused)")
        let saved = try #require(tokenOffset(at: tokenURL))
        try #require(saved > 0)

        // The disk now fails every flush; the resumed response is held right away (interrupt) or flows (failure).
        try Data().write(to: marker)
        let held = served.holdBody(after: 0)
        defer { held.open() }
        if ending == .failure { held.open() }
        let second = try CLIProcess(
            ["resume", tokenURL.path] + Self.patient, in: scratch.url,
            environment: ["RESUMABLE_FAIL_FLUSHES_WHILE": marker.path])
        let ended: CLIResult
        switch ending {
        case .interrupt:
            let waiting = await held.waitUntilHeld(count: 1, timeout: .seconds(60))
            try #require(waiting, "\(held) \(second.stderrSoFar)")
            second.send(SIGINT)
            ended = try await second.finish()
            #expect(ended.exitCode == 130, "\(ended)")
        case .failure:
            ended = try await second.finish()
            #expect(ended.exitCode != 0 && ended.exitCode != nil, "\(ended)")
        }
        // The token file the run was given is still there, at the same offset, and its partial file with it.
        #expect(tokenOffset(at: tokenURL) == saved, "\(ended)")
        #expect(scratch.partialFiles().count == 1, "\(scratch.contents())")
        // So the report must say so: not "nothing to resume", and the resume command.
        #expect(!ended.stderr.contains("nothing to resume"), "\(ended)")
        #expect(ended.stderr.contains("resumable resume \(tokenURL.path)"), "\(ended)")
        #expect(ended.stderr.contains("at byte \(saved) of \(Self.length)"), "\(ended)")

        // And it does resume.
        try FileManager.default.removeItem(at: marker)
        served.setBehavior(.normal)
        let third = try await CLIProcess.run(["resume", tokenURL.path, "-q"], in: scratch.url)
        #expect(third.exitCode == 0, "\(third)")
        #expect(try Data(contentsOf: scratch.file("file.bin")) == served.bytes)
    }
}
