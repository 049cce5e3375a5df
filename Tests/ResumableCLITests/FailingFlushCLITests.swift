import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A disk whose flushes start failing in the middle of a download (`RESUMABLE_FAIL_FLUSHES_WHILE`, the debug
/// builds' seam: flushes fail with `EIO` while a file exists). The download then hands out no token past its last
/// flush that succeeded; the token file of that flush is left, and the CLI says so instead of "nothing to resume".
@Suite("The CLI when flushes start failing")
struct FailingFlushCLITests {
    static let length: Int64 = 4 << 20
    static let patient = ["--timeout", "3600", "--connections", "1"]

    enum Ending: String, CaseIterable, Sendable {
        /// SIGINT: the pause's flush fails.
        case interrupt
        /// The next periodic checkpoint's flush fails, and the download with it.
        case failure
    }

    /// `get` of a 4 MiB file held after 64 KiB, whose flushes fail while `marker` exists, once a checkpoint with
    /// bytes reached its token file (at `offset`).
    struct CheckpointedGet {
        let served: ServedFile
        let gate: BodyGate
        let scratch: ScratchDirectory
        let markers: TemporaryDirectory
        let marker: URL
        let tokenURL: URL
        let process: CLIProcess
        let offset: Int64

        init() async throws {
            served = try ServedFile(length: FailingFlushCLITests.length)
            gate = served.holdBody(after: 64 * 1024)
            scratch = try ScratchDirectory()
            markers = try TemporaryDirectory()
            marker = markers.url.appendingPathComponent("fail-flushes")
            let tokenURL = scratch.file("file.bin.resumable.json")
            self.tokenURL = tokenURL
            process = try CLIProcess(
                ["get", served.url] + FailingFlushCLITests.patient, in: scratch.url,
                environment: ["RESUMABLE_FAIL_FLUSHES_WHILE": marker.path])
            let checkpointed = try await trickle(gate, bodyLength: FailingFlushCLITests.length) {
                (tokenOffset(at: tokenURL) ?? 0) > 0
            }
            try #require(checkpointed, "\(gate) \(process.stderrSoFar)")
            offset = try #require(tokenOffset(at: tokenURL))
        }
    }

    @Test(
        "When flushes start failing, the token of the last flush that succeeded is left, reported, and resumes",
        arguments: Ending.allCases)
    func lastFlushedTokenIsReported(ending: Ending) async throws {
        let run = try await CheckpointedGet()
        // Its marker directory lives as long as the test.
        defer { withExtendedLifetime(run) {} }
        let (served, gate, scratch, marker, tokenURL, first) = (
            run.served, run.gate, run.scratch, run.marker, run.tokenURL, run.process
        )
        defer { gate.open() }
        let flushed = run.offset

        try Data().write(to: marker)
        let ended: CLIResult
        switch ending {
        case .interrupt:
            first.send(SIGINT)
            ended = try await first.finish()
            #expect(ended.exitCode == 130, "\(ended)")
            #expect(!ended.stderr.contains("nothing to resume"), "\(ended)")
        case .failure:
            let stopped = try await trickle(gate, bodyLength: Self.length) { !first.isRunning }
            try #require(stopped, "the download went on while its flushes failed: \(gate) \(first.stderrSoFar)")
            ended = try await first.finish()
            #expect(ended.exitCode != 0 && ended.exitCode != nil, "\(ended)")
            #expect(ended.stderr.contains("flushing"), "\(ended)")
        }
        #expect(ended.stderr.contains("at byte \(flushed)"), "\(ended)")
        #expect(ended.stderr.contains("resumable resume \(tokenURL.path)"), "\(ended)")
        #expect(tokenOffset(at: tokenURL) == flushed, "the token file moved past the last flush that succeeded")

        try FileManager.default.removeItem(at: marker)
        served.setBehavior(.normal)
        let second = try await CLIProcess.run(["resume", tokenURL.path, "-q"], in: scratch.url)
        #expect(second.exitCode == 0, "\(second)")
        #expect(served.ranges.last == "bytes=\(flushed)-")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
        #expect(scratch.contents() == ["file.bin"])
    }

    /// `resume TOKEN` on a disk whose flushes fail from the start: the run writes no checkpoint of its own, so
    /// `TokenFile.end(leaving: nil)` (which reported only a token "this run wrote") reported nothing, although the token
    /// file it was given stays on disk, names the kept partial file and resumes fine. The CLI says "nothing to
    /// resume" (SIGINT) or gives no resume command (failure), and `--json` reports `token: null`: exactly what
    /// 2997d49 set out to stop, for the run that resumed instead of the run that started.
    @Test(
        "A resume whose flushes fail from the start reports the token file it was given, which stays and resumes",
        arguments: Ending.allCases)
    func resumedTokenIsReportedWhenFlushesFail(ending: Ending) async throws {
        let run = try await CheckpointedGet()
        // Its marker directory lives as long as the test.
        defer { withExtendedLifetime(run) {} }
        let (served, gate, scratch, marker, tokenURL, first) = (
            run.served, run.gate, run.scratch, run.marker, run.tokenURL, run.process
        )
        defer { gate.open() }
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
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
    }
}
