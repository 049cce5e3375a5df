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
@Suite("signals and hand-offs")
struct SignalTests {
    /// 4 MiB at 1 MiB/s: about four seconds, plenty of time to interrupt.
    private static let slow = Behavior(throttleBytesPerSecond: 1 << 20)
    private static let length: Int64 = 4 << 20

    @Test(
        "A signal mid-transfer leaves a token that a second process resumes to an identical file",
        arguments: [SIGINT, SIGTERM])
    func signalThenResume(signal: Int32) async throws {
        let served = try ServedFile(length: Self.length, behavior: Self.slow)
        let scratch = try ScratchDirectory()
        let first = try CLIProcess(["get", served.url], in: scratch.url)
        let started = try await eventually { scratch.largestPartialFileSize() >= 200_000 }
        #expect(started)
        first.send(signal)
        let interrupted = try await first.finish()
        #expect(interrupted.exitCode == (signal == SIGINT ? 130 : 143), "\(interrupted)")
        let tokenURL = scratch.file("file.bin.resumable.json")
        #expect(interrupted.stderr.contains("resumable resume \(tokenURL.path)"))
        let token = try ResumeToken(contentsOf: tokenURL)
        #expect(token.offset > 0 && token.offset < Self.length)
        #expect(scratch.largestPartialFileSize() == token.offset)

        served.setBehavior(.normal)
        let second = try await CLIProcess.run(["resume", tokenURL.path], in: scratch.url)
        #expect(second.exitCode == 0, "\(second)")
        #expect(served.ranges.last == "bytes=\(token.offset)-")
        #expect(try Data(contentsOf: scratch.file("file.bin")) == served.bytes)
        #expect(scratch.contents() == ["file.bin"], "the token and the partial file are gone")
    }

    @Test("A killed process leaves a checkpointed token that a second process resumes to an identical file")
    func killThenResume() async throws {
        let served = try ServedFile(length: Self.length, behavior: Self.slow)
        let scratch = try ScratchDirectory()
        let tokenURL = scratch.file("file.bin.resumable.json")
        let first = try CLIProcess(["get", served.url, "--quiet"], in: scratch.url)
        let checkpointed = try await eventually {
            ((try? ResumeToken(contentsOf: tokenURL))?.offset ?? 0) > 0
        }
        #expect(checkpointed)
        first.send(SIGKILL)
        let killed = try await first.finish()
        #expect(killed.signal == SIGKILL)
        let token = try ResumeToken(contentsOf: tokenURL)

        served.setBehavior(.normal)
        let second = try await CLIProcess.run(["resume", tokenURL.path, "--json"], in: scratch.url)
        #expect(second.exitCode == 0, "\(second)")
        #expect(served.ranges.last == "bytes=\(token.offset)-")
        #expect(try Data(contentsOf: scratch.file("file.bin")) == served.bytes)
        #expect(scratch.contents() == ["file.bin"])
    }

    @Test("Resuming a token whose temporary file a running process holds exits with 75 and changes nothing")
    func tokenInUse() async throws {
        let served = try ServedFile(length: Self.length, behavior: Self.slow)
        let scratch = try ScratchDirectory()
        let tokenURL = scratch.file("file.bin.resumable.json")
        let running = try CLIProcess(["get", served.url], in: scratch.url)
        let tokenWritten = try await eventually { (try? ResumeToken(contentsOf: tokenURL)) != nil }
        #expect(tokenWritten)

        let refused = try await CLIProcess.run(["resume", tokenURL.path], in: scratch.url)
        #expect(refused.exitCode == 75, "\(refused)")
        #expect(refused.stderr.contains("in use"))
        let refusedJSON = try await CLIProcess.run(["resume", tokenURL.path, "--json"], in: scratch.url)
        #expect(refusedJSON.exitCode == 75)
        #expect((try jsonObject(refusedJSON.stdout)["error"] as? [String: Any])?["code"] as? String == "tokenInUse")
        #expect(FileManager.default.fileExists(atPath: tokenURL.path))

        running.send(SIGTERM)
        let stopped = try await running.finish()
        #expect(stopped.exitCode == 143, "\(stopped)")
        served.setBehavior(.normal)
        let resumed = try await CLIProcess.run(["resume", tokenURL.path, "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        #expect(try Data(contentsOf: scratch.file("file.bin")) == served.bytes)
    }

    @Test("A resume interrupted again leaves an updated token that a third process finishes")
    func resumeInterruptedAgain() async throws {
        let served = try ServedFile(length: Self.length, behavior: Self.slow)
        let scratch = try ScratchDirectory()
        let tokenURL = scratch.file("file.bin.resumable.json")
        let first = try CLIProcess(["get", served.url, "-q"], in: scratch.url)
        _ = try await eventually { scratch.largestPartialFileSize() >= 200_000 }
        first.send(SIGINT)
        #expect(try await first.finish().exitCode == 130)
        let firstToken = try ResumeToken(contentsOf: tokenURL)

        let second = try CLIProcess(["resume", tokenURL.path, "--json"], in: scratch.url)
        _ = try await eventually { scratch.largestPartialFileSize() >= firstToken.offset + 200_000 }
        second.send(SIGINT)
        let secondResult = try await second.finish()
        #expect(secondResult.exitCode == 130, "\(secondResult)")
        let paused = try jsonObject(secondResult.stdout)
        #expect(paused["status"] as? String == "interrupted")
        #expect(paused["signal"] as? String == "SIGINT")
        let secondToken = try ResumeToken(contentsOf: tokenURL)
        #expect(secondToken.offset > firstToken.offset)
        #expect((paused["offset"] as? NSNumber)?.int64Value == secondToken.offset)

        served.setBehavior(.normal)
        let third = try await CLIProcess.run(["resume", tokenURL.path], in: scratch.url)
        #expect(third.exitCode == 0, "\(third)")
        #expect(served.ranges.last == "bytes=\(secondToken.offset)-")
        #expect(try Data(contentsOf: scratch.file("file.bin")) == served.bytes)
    }
}
