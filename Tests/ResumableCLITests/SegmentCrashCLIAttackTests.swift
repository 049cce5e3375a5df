import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review of issue 10 through the real binary: `get --connections 4` killed with SIGKILL at chosen
/// points (the four responses held at one ``BodyGate``), the token checked against the temporary file's bytes, then
/// `inspect` and `resume` with other connection counts and `--sha256`.
@Suite("Segments under attack: kill -9 of get --connections 4, then inspect and resume")
struct SegmentCrashCLIAttackTests {
    static let length = SegmentedCLITests.length

    /// A `get --connections 4` killed with SIGKILL: the four responses held after `bytes` bytes; with
    /// `listRanges`, let on in small steps until the token on disk lists the three other segments.
    struct Killed {
        let served: ServedFile
        let scratch: ScratchDirectory
        let tokenURL: URL
        let token: ResumeToken
    }

    static func killedDownload(extra: [String] = [], after bytes: Int64, listRanges: Bool) async throws -> Killed {
        let served = try ServedFile(length: length)
        let scratch = try ScratchDirectory()
        let tokenURL = scratch.file("file.bin.resumable.json")
        let gate = SegmentedCLITests.holdFourSegments(of: served, after: bytes)
        defer { gate.open() }
        let process = try await CLIProcess.start(
            ["get", served.url, "--connections", "4", "--timeout", "3600", "--quiet"] + extra, in: scratch.url)
        try #require(
            await gate.waitUntilHeld(count: 4, timeout: CLIProcess.deadline), "\(gate) \(process.stderrSoFar)")
        if listRanges {
            let listed = try await trickle(gate, bodyLength: SegmentedCLITests.quarter) {
                ((try? ResumeToken(contentsOf: tokenURL))?.completedRanges.count ?? 0) >= 3
            }
            try #require(listed, "\(gate) \(process.stderrSoFar)")
        } else {
            // The accepted response's token (offset 0) is written before its first byte.
            try #require(await eventually { FileManager.default.fileExists(atPath: tokenURL.path) })
        }
        process.send(SIGKILL)
        let killed = try await process.finish()
        try #require(killed.signal == SIGKILL, "\(killed)")
        let token = try ResumeToken(contentsOf: tokenURL)
        // Rule 2: every byte the token lists is in the file, and is the server's.
        let expected = served.bytes
        let present = (token.offset > 0 ? [0..<token.offset] : []) + token.completedRanges
        let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: token.tempPath))
        defer { try? handle.close() }
        for range in present {
            try handle.seek(toOffset: UInt64(range.lowerBound))
            let bytes = try handle.read(upToCount: range.count) ?? Data()
            expectSameBytes(bytes, expected[Int(range.lowerBound)..<Int(range.upperBound)], "\(range) is not on disk")
        }
        return Killed(served: served, scratch: scratch, tokenURL: tokenURL, token: token)
    }

    static func digest(of data: Data) -> String {
        var digest = PortableSHA256()
        digest.update(data)
        return digest.hexDigest()
    }

    @Test(
        "kill -9 mid-segments, then resume with 1 or 16 connections and the right --sha256: the exact file, verified",
        arguments: ["1", "16"])
    func resumeWithDigest(connections: String) async throws {
        let killed = try await Self.killedDownload(after: 64 << 10, listRanges: true)
        #expect(killed.token.version == 2)
        let digest = Self.digest(of: killed.served.bytes)
        let resumed = try await CLIProcess.run(
            ["resume", killed.tokenURL.path, "--connections", connections, "--sha256", digest], in: killed.scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        #expect(resumed.stderr.contains("SHA-256 verified: \(digest)"), "\(resumed.stderr)")
        try expectSameBytes(Data(contentsOf: killed.scratch.file("file.bin")), killed.served.bytes)
        #expect(killed.scratch.contents() == ["file.bin"], "no token, no partial file left")
    }

    @Test("kill -9 right after the four heads (no body byte on disk), then resume --connections 16: the exact file")
    func killBeforeAnyByte() async throws {
        let killed = try await Self.killedDownload(after: 0, listRanges: false)
        let resumed = try await CLIProcess.run(
            ["resume", killed.tokenURL.path, "--connections", "16", "--quiet"], in: killed.scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        try expectSameBytes(Data(contentsOf: killed.scratch.file("file.bin")), killed.served.bytes)
        #expect(killed.scratch.contents() == ["file.bin"])
    }

    @Test(
        "get --connections 4 --sha256 WRONG killed mid-segments, resumed with 2: exit 1, no file, no token, no partial"
    )
    func wrongDigestAfterResume() async throws {
        let wrong = String(repeating: "0", count: 64)
        let killed = try await Self.killedDownload(extra: ["--sha256", wrong], after: 64 << 10, listRanges: true)
        #expect(killed.token.expectedSHA256 == wrong)
        let resumed = try await CLIProcess.run(
            ["resume", killed.tokenURL.path, "--connections", "2"], in: killed.scratch.url)
        #expect(resumed.exitCode == 1, "\(resumed)")
        #expect(resumed.stderr.contains("SHA-256"), "\(resumed.stderr)")
        #expect(killed.scratch.contents().isEmpty, "\(killed.scratch.contents())")
    }

    /// `inspect` runs "exactly the checks 'resume' runs" and says what a resume would do. For a version 2 token left
    /// by a killed `get --connections 4` (a preallocated file, ranges beyond the offset) it says the file is "longer
    /// than the offset; a resume first cuts it to <offset> bytes" and reports the offset alone as the progress,
    /// while `resume` keeps every listed range (it cuts only after the last one,
    /// `ResumeStateMachine.nextRequest`'s `trustedLength`) and asks only for the gaps. The report promises a loss
    /// that does not happen, and understates what is on disk.
    @Test("inspect of a version 2 token describes what resume keeps: the ranges, not a cut to the offset")
    func inspectVersion2() async throws {
        let killed = try await Self.killedDownload(after: 64 << 10, listRanges: true)
        let token = killed.token
        let lastEnd = try #require(token.completedRanges.last?.upperBound)
        let text = try await CLIProcess.run(["inspect", killed.tokenURL.path], in: killed.scratch.url)
        #expect(text.exitCode == 0, "\(text)")
        #expect(
            !text.stdout.contains("cuts it to \(token.offset) bytes"),
            "inspect says a resume cuts the file to the offset, dropping \(token.completedRanges): \(text.stdout)")
        let json = try jsonObject(
            try await CLIProcess.run(["inspect", killed.tokenURL.path, "--json"], in: killed.scratch.url).stdout)
        let onDisk = token.offset + token.completedRanges.reduce(0) { $0 + Int64($1.count) }
        let fraction = try #require(json["fractionCompleted"] as? Double)
        #expect(
            // `fractionCompleted` is printed with three decimals.
            fraction >= Double(onDisk) / Double(Self.length) - 0.0005,
            "fractionCompleted \(fraction) counts only the offset, not the \(onDisk) bytes the token lists")

        // What resume really does: keeps every range, asks only for the gaps.
        killed.served.server.clearRequests()
        let resumed = try await CLIProcess.run(
            ["resume", killed.tokenURL.path, "--connections", "1", "--quiet"], in: killed.scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        try expectSameBytes(Data(contentsOf: killed.scratch.file("file.bin")), killed.served.bytes)
        let firstRange = try #require(token.completedRanges.first)
        #expect(killed.served.ranges.first == "bytes=\(token.offset)-\(firstRange.lowerBound - 1)")
        #expect(lastEnd > token.offset)
    }
}
