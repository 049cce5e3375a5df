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
    private static let length: Int64 = 4 << 20
    private static let patient = ["--timeout", "3600", "--connections", "1"]

    enum Ending: String, CaseIterable, Sendable {
        /// SIGINT: the pause's flush fails.
        case interrupt
        /// The next periodic checkpoint's flush fails, and the download with it.
        case failure
    }

    @Test(
        "When flushes start failing, the token of the last flush that succeeded is left, reported, and resumes",
        arguments: Ending.allCases)
    func lastFlushedTokenIsReported(ending: Ending) async throws {
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
        let flushed = try #require(tokenOffset(at: tokenURL))

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
        #expect(try Data(contentsOf: scratch.file("file.bin")) == served.bytes)
        #expect(scratch.contents() == ["file.bin"])
    }
}
