import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Crashes at any moment, hand-offs between processes, and a full disk, through the real binary.
@Suite("crashes, hand-offs and a full disk")
struct CrashAndHandoffTests {
    private static let length: Int64 = 6 << 20

    @Test(
        "kill -9 at several random moments: each resume starts at or after the last checkpoint, and the file ends identical"
    )
    func repeatedKills() async throws {
        let served = try ServedFile(length: Self.length)
        let scratch = try ScratchDirectory()
        let tokenURL = scratch.file("file.bin.resumable.json")
        var generator = SystemRandomNumberGenerator()
        // A long idle timeout: a held process never gives up and retries while a busy machine keeps the test waiting.
        // One connection: each resume must start at the single transfer's last checkpoint (SegmentedCLITests kills several).
        let patient = ["--timeout", "3600", "--connections", "1"]
        var arguments = ["get", served.url, "--quiet"] + patient
        var lastCheckpoint: Int64 = 0
        for round in 0..<3 {
            // Each process's response is held by a gate of its own, so no process can finish the file.
            let gate = served.holdBody(after: 64 * 1024)
            let bodyLength = Self.length - lastCheckpoint
            let process = try CLIProcess(arguments, in: scratch.url)
            // Let it run past a checkpoint beyond the last one (checkpoints come while bytes arrive) …
            let previous = lastCheckpoint
            let checkpointed = try await trickle(gate, bodyLength: bodyLength) {
                (tokenOffset(at: tokenURL) ?? 0) > previous
            }
            #expect(checkpointed, "round \(round): \(gate) \(process.stderrSoFar)")
            // … then a random way further, and kill it at a random moment: maybe while bytes are arriving.
            let further = Int64.random(in: 0...(256 * 1024), using: &generator)
            if let limit = gate.limit, limit + further < bodyLength { gate.advance(by: further) }
            try await Task.sleep(for: .milliseconds(Int.random(in: 0...300, using: &generator)))
            let seen = try ResumeToken(contentsOf: tokenURL).offset
            served.server.clearRequests()
            process.send(SIGKILL)
            let killed = try await process.finish()
            #expect(killed.signal == SIGKILL)
            let token = try ResumeToken(contentsOf: tokenURL)
            #expect(token.offset >= seen, "the token on disk never goes backwards")
            lastCheckpoint = token.offset
            arguments = ["resume", tokenURL.path, "--quiet"] + patient
            if round < 2 {
                // The next round's first request must start at the checkpoint, not at 0.
                _ = served.holdBody(after: 0)
                let next = try CLIProcess(arguments, in: scratch.url)
                let asked = try await eventually { served.server.requests(for: served.path).count > 0 }
                #expect(asked)
                #expect(served.ranges.first == "bytes=\(token.offset)-", "round \(round)")
                next.send(SIGKILL)
                _ = try await next.finish()
                lastCheckpoint = tokenOffset(at: tokenURL) ?? lastCheckpoint
            }
        }
        served.setBehavior(.normal)
        served.server.clearRequests()
        let final = try await CLIProcess.run(["resume", tokenURL.path, "--json"], in: scratch.url)
        #expect(final.exitCode == 0, "\(final)")
        let first = try #require(served.ranges.first ?? nil)
        #expect(first.hasPrefix("bytes=") && first != "bytes=0-", "the last resume did not start from 0")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
        #expect(scratch.contents() == ["file.bin"], "no token, no partial file left")
    }

    @Test("A late resumer after the download finished gets a clear 'finished or gone' error and exit 65")
    func lateResumer() async throws {
        let served = try ServedFile(behavior: Behavior(dropAfterBytes: 100_000))
        let scratch = try ScratchDirectory()
        let failed = try await CLIProcess.run(["get", served.url, "--retries", "0", "-q"], in: scratch.url)
        #expect(failed.exitCode == 75, "\(failed)")
        let tokenURL = scratch.file("file.bin.resumable.json")
        let copy = scratch.file("copy-of-token.json")
        try FileManager.default.copyItem(at: tokenURL, to: copy)
        served.setBehavior(.normal)

        let first = try await CLIProcess.run(["resume", tokenURL.path, "-q"], in: scratch.url)
        #expect(first.exitCode == 0, "\(first)")
        let late = try await CLIProcess.run(["resume", tokenURL.path], in: scratch.url)
        #expect(late.exitCode == 65, "\(late)")
        #expect(late.stderr.contains("finished") && late.stderr.contains("gone"), "\(late.stderr)")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
        _ = copy
    }

    @Test(
        "A token aimed at a symlink or at another directory exits with 65 and touches nothing",
        arguments: ["symlink", "other directory", "hostile name"])
    func hostileTokens(kind: String) async throws {
        let served = try ServedFile(behavior: Behavior(dropAfterBytes: 100_000))
        let scratch = try ScratchDirectory()
        _ = try await CLIProcess.run(["get", served.url, "--retries", "0", "-q"], in: scratch.url)
        served.setBehavior(.normal)
        let tokenURL = scratch.file("file.bin.resumable.json")
        let token = try ResumeToken(contentsOf: tokenURL)
        let victim = try scratch.subdirectory("victim")
        let precious = victim.appendingPathComponent("precious.txt")
        try Data("precious".utf8).write(to: precious)
        var object = try jsonObject(String(decoding: try Data(contentsOf: tokenURL), as: UTF8.self))
        switch kind {
        case "symlink":
            try FileManager.default.removeItem(atPath: token.tempPath)
            try FileManager.default.createSymbolicLink(atPath: token.tempPath, withDestinationPath: precious.path)
        case "other directory":
            let moved = victim.appendingPathComponent(URL(fileURLWithPath: token.tempPath).lastPathComponent)
            try FileManager.default.copyItem(atPath: token.tempPath, toPath: moved.path)
            object["tempPath"] = moved.path
        default:
            object["suggestedFilename"] = "../victim/precious.txt"
        }
        try JSONSerialization.data(withJSONObject: object).write(to: tokenURL)
        let before = try Data(contentsOf: precious)
        let resumed = try await CLIProcess.run(["resume", tokenURL.path], in: scratch.url)
        #expect(resumed.exitCode == 65, "\(resumed)")
        try expectSameBytes(Data(contentsOf: precious), before)
        #expect(!FileManager.default.fileExists(atPath: scratch.file("file.bin").path))
        #expect(served.server.requests(for: served.path).count == 1, "no request was made")
    }

    @Test(
        "A file-size limit (ulimit -f) fails as a full disk with exit 75 and a token; without it the resume completes")
    func fileSizeLimit() async throws {
        let served = try ServedFile(length: 1 << 20)
        let scratch = try ScratchDirectory()
        let limited = try await CLIProcess(["get", served.url, "--retries", "0"], in: scratch.url, fileSizeLimit: 512)
            .finish()
        #expect(limited.exitCode == 75, "\(limited)")
        #expect(limited.stderr.contains("File too large") || limited.stderr.contains("space"), "\(limited.stderr)")
        let tokenURL = scratch.file("file.bin.resumable.json")
        let token = try ResumeToken(contentsOf: tokenURL)
        #expect(token.offset > 0 && token.offset <= 512 * 512)
        let resumed = try await CLIProcess.run(["resume", tokenURL.path, "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        #expect(served.ranges.last == "bytes=\(token.offset)-")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
    }
}
