import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Pausing by signal, crashing, and handing a download over to a second process.
///
/// Nothing here depends on timing: the server holds the body after a known number of bytes (``BodyGate``), so a
/// signal always comes mid-transfer, once those bytes are on disk, however busy the machine is.
@Suite("signals and hand-offs")
struct SignalTests {
    private static let length: Int64 = 4 << 20
    /// Where the first process's body is held.
    private static let pausePoint: Int64 = 1 << 20
    /// For a process the test holds at a gate: an idle timeout far beyond any wait of the test, so that the
    /// process never gives up on the held response and retries while a busy machine keeps the test waiting.
    // One connection: these tests are about a single transfer's signals and tokens (SegmentedCLITests covers several).
    private static let patient = ["--timeout", "3600", "--connections", "1"]

    @Test(
        "A signal mid-transfer leaves a token that a second process resumes to an identical file",
        arguments: [SIGINT, SIGTERM])
    func signalThenResume(signal: Int32) async throws {
        let served = try ServedFile(length: Self.length)
        let gate = served.holdBody(after: Self.pausePoint)
        let scratch = try ScratchDirectory()
        let first = try CLIProcess(["get", served.url] + Self.patient, in: scratch.url)
        let held = try await eventually { scratch.largestPartialFileSize() == Self.pausePoint }
        #expect(held, "\(gate) \(first.stderrSoFar)")
        first.send(signal)
        let interrupted = try await first.finish()
        #expect(interrupted.exitCode == (signal == SIGINT ? 130 : 143), "\(interrupted)")
        let tokenURL = scratch.file("file.bin.resumable.json")
        #expect(interrupted.stderr.contains("resumable resume \(tokenURL.path)"))
        let token = try ResumeToken(contentsOf: tokenURL)
        #expect(token.offset == Self.pausePoint, "everything received was kept, and nothing more claimed")
        #expect(scratch.largestPartialFileSize() == token.offset)

        served.setBehavior(.normal)
        let second = try await CLIProcess.run(["resume", tokenURL.path], in: scratch.url)
        #expect(second.exitCode == 0, "\(second)")
        #expect(served.ranges.last == "bytes=\(token.offset)-")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
        #expect(scratch.contents() == ["file.bin"], "the token and the partial file are gone")
    }

    @Test("A killed process leaves a checkpointed token that a second process resumes to an identical file")
    func killThenResume() async throws {
        let served = try ServedFile(length: Self.length)
        let gate = served.holdBody(after: 64 * 1024)
        let scratch = try ScratchDirectory()
        let tokenURL = scratch.file("file.bin.resumable.json")
        let first = try CLIProcess(["get", served.url, "--quiet"] + Self.patient, in: scratch.url)
        // Checkpoints come while bytes arrive: let the body trickle until one with data on disk is written.
        let checkpointed = try await trickle(gate, bodyLength: Self.length) { (tokenOffset(at: tokenURL) ?? 0) > 0 }
        #expect(checkpointed, "\(gate) \(first.stderrSoFar)")
        first.send(SIGKILL)
        let killed = try await first.finish()
        #expect(killed.signal == SIGKILL)
        let token = try ResumeToken(contentsOf: tokenURL)
        #expect(token.offset > 0 && token.offset < Self.length)

        served.setBehavior(.normal)
        let second = try await CLIProcess.run(["resume", tokenURL.path, "--json"], in: scratch.url)
        #expect(second.exitCode == 0, "\(second)")
        #expect(served.ranges.last == "bytes=\(token.offset)-")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
        #expect(scratch.contents() == ["file.bin"])
    }

    @Test("Resuming a token whose temporary file a running process holds exits with 75 and changes nothing")
    func tokenInUse() async throws {
        let served = try ServedFile(length: Self.length)
        let gate = served.holdBody(after: 64 * 1024)
        let scratch = try ScratchDirectory()
        let tokenURL = scratch.file("file.bin.resumable.json")
        let running = try CLIProcess(["get", served.url] + Self.patient, in: scratch.url)
        let tokenWritten = try await trickle(gate, bodyLength: Self.length) { tokenOffset(at: tokenURL) != nil }
        #expect(tokenWritten, "\(gate) \(running.stderrSoFar)")

        // The gate holds the body, so the running process is still downloading, with the file locked.
        let refused = try await CLIProcess.run(["resume", tokenURL.path], in: scratch.url)
        #expect(refused.exitCode == 75, "\(refused)")
        #expect(refused.stderr.contains("in use"))
        let refusedJSON = try await CLIProcess.run(["resume", tokenURL.path, "--json"], in: scratch.url)
        #expect(refusedJSON.exitCode == 75)
        #expect((try jsonObject(refusedJSON.stdout)["error"] as? [String: Any])?["code"] as? String == "tokenInUse")
        #expect(FileManager.default.fileExists(atPath: tokenURL.path))
        #expect(served.server.requests(for: served.path).count == 1, "the refused resumes made no request")

        running.send(SIGTERM)
        let stopped = try await running.finish()
        #expect(stopped.exitCode == 143, "\(stopped)")
        served.setBehavior(.normal)
        let resumed = try await CLIProcess.run(["resume", tokenURL.path, "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
    }

    @Test("A resume interrupted again leaves an updated token that a third process finishes")
    func resumeInterruptedAgain() async throws {
        let served = try ServedFile(length: Self.length)
        let scratch = try ScratchDirectory()
        let tokenURL = scratch.file("file.bin.resumable.json")
        let firstGate = served.holdBody(after: Self.pausePoint)
        let first = try CLIProcess(["get", served.url, "-q"] + Self.patient, in: scratch.url)
        let firstHeld = try await eventually { scratch.largestPartialFileSize() == Self.pausePoint }
        #expect(firstHeld, "\(firstGate) \(first.stderrSoFar)")
        first.send(SIGINT)
        #expect(try await first.finish().exitCode == 130)
        let firstToken = try ResumeToken(contentsOf: tokenURL)
        #expect(firstToken.offset == Self.pausePoint)

        // The resume's 206 is held after as many bytes again.
        let secondGate = served.holdBody(after: Self.pausePoint)
        let second = try CLIProcess(["resume", tokenURL.path, "--json"] + Self.patient, in: scratch.url)
        let secondHeld = try await eventually { scratch.largestPartialFileSize() == 2 * Self.pausePoint }
        #expect(secondHeld, "\(secondGate) \(second.stderrSoFar)")
        second.send(SIGINT)
        let secondResult = try await second.finish()
        #expect(secondResult.exitCode == 130, "\(secondResult)")
        let paused = try jsonObject(secondResult.stdout)
        #expect(paused["status"] as? String == "interrupted")
        #expect(paused["signal"] as? String == "SIGINT")
        let secondToken = try ResumeToken(contentsOf: tokenURL)
        #expect(secondToken.offset == 2 * Self.pausePoint)
        #expect((paused["offset"] as? NSNumber)?.int64Value == secondToken.offset)

        served.setBehavior(.normal)
        let third = try await CLIProcess.run(["resume", tokenURL.path], in: scratch.url)
        #expect(third.exitCode == 0, "\(third)")
        #expect(served.ranges.last == "bytes=\(secondToken.offset)-")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
    }
}
