import Foundation
import LoopbackServer
import Resumable
import Testing

/// `resumable resume` and `resumable inspect` with good, damaged and foreign tokens.
@Suite("resume and inspect")
struct ResumeAndInspectTests {
    /// A download that failed after exactly 100 000 bytes, leaving its token beside the destination.
    private struct PartialDownload {
        let served: ServedFile
        let scratch: ScratchDirectory
        let tokenURL: URL
        let token: ResumeToken

        init() async throws {
            served = try ServedFile(behavior: Behavior(dropAfterBytes: 100_000))
            scratch = try ScratchDirectory()
            let result = try await CLIProcess.run(["get", served.url, "--retries", "0", "-q"], in: scratch.url)
            try #require(result.exitCode == 75, "\(result)")
            tokenURL = scratch.file("file.bin.resumable.json")
            token = try ResumeToken(contentsOf: tokenURL)
            served.setBehavior(.normal)
        }

        /// Rewrites one field of the token file's JSON.
        func rewriteToken(_ change: (inout [String: Any]) -> Void) throws {
            var object = try jsonObject(String(decoding: try Data(contentsOf: tokenURL), as: UTF8.self))
            change(&object)
            try JSONSerialization.data(withJSONObject: object).write(to: tokenURL)
        }
    }

    @Test("inspect describes a token: URL, offset of total, validators, temporary file and destination")
    func inspectText() async throws {
        let partial = try await PartialDownload()
        let result = try await CLIProcess.run(["inspect", partial.tokenURL.path], in: partial.scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        #expect(result.stdout.contains("URL:            \(partial.served.url)"))
        #expect(result.stdout.contains("100000 of 262144 bytes (38.1%)"))
        #expect(result.stdout.contains("ETag:           \(partial.token.etag ?? "?")"))
        #expect(result.stdout.contains("Mon, 02 Nov 2026 10:00:00 GMT"))
        #expect(result.stdout.contains(partial.token.tempPath))
        #expect(result.stdout.contains("present, 100000 bytes: consistent"))
        #expect(result.stdout.contains("\(partial.scratch.url.path)/ (directory; the file will be named 'file.bin')"))
        #expect(result.stdout.contains("Created:") && result.stdout.contains("Updated:"))
    }

    @Test("inspect --json prints one object with the token and the temporary file's state")
    func inspectJSON() async throws {
        let partial = try await PartialDownload()
        let result = try await CLIProcess.run(["inspect", "--json", partial.tokenURL.path], in: partial.scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        let object = try jsonObject(result.stdout)
        #expect(object["status"] as? String == "valid")
        #expect((object["offset"] as? NSNumber)?.int64Value == 100_000)
        let temporary = object["temporaryFile"] as? [String: Any]
        #expect(temporary?["state"] as? String == "consistent")
        #expect((temporary?["size"] as? NSNumber)?.int64Value == 100_000)
        let token = object["token"] as? [String: Any]
        #expect(token?["tempPath"] as? String == partial.token.tempPath)
        #expect((token?["version"] as? NSNumber)?.intValue == 1)
    }

    @Test("inspect tells a shorter, a longer and a missing temporary file apart")
    func inspectTemporaryFileStates() async throws {
        let partial = try await PartialDownload()
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: partial.token.tempPath))
        try handle.truncate(atOffset: 50_000)
        let shorter = try await CLIProcess.run(["inspect", partial.tokenURL.path], in: partial.scratch.url)
        #expect(shorter.stdout.contains("shorter than the offset; a resume continues from byte 50000"))
        try handle.truncate(atOffset: 150_000)
        try handle.close()
        let longer = try await CLIProcess.run(["inspect", partial.tokenURL.path], in: partial.scratch.url)
        #expect(longer.stdout.contains("longer than the offset"))
        try FileManager.default.removeItem(atPath: partial.token.tempPath)
        let missing = try await CLIProcess.run(["inspect", "--json", partial.tokenURL.path], in: partial.scratch.url)
        // As `resume TOKEN` would: without its temporary file the token's destination needs -o, so 65.
        #expect(missing.exitCode == 65)
        #expect((try jsonObject(missing.stdout)["temporaryFile"] as? [String: Any])?["state"] as? String == "missing")
    }

    @Test(
        "An unusable token makes inspect and resume exit with 65 and touches nothing",
        arguments: ["malformed", "newer version", "missing field", "foreign temporary file", "no such file"])
    func unusableToken(damage: String) async throws {
        let partial = try await PartialDownload()
        var tokenPath = partial.tokenURL.path
        switch damage {
        case "malformed":
            try Data("{ not json".utf8).write(to: partial.tokenURL)
        case "newer version":
            try partial.rewriteToken { $0["version"] = 99 }
        case "missing field":
            try partial.rewriteToken { $0["tempPath"] = nil }
        case "foreign temporary file":
            try partial.rewriteToken { $0["tempPath"] = "/etc/passwd" }
        default:
            tokenPath = partial.scratch.file("nothing.json").path
        }
        let before = partial.scratch.contents()
        let tokenBytes = try? Data(contentsOf: URL(fileURLWithPath: tokenPath))

        let inspected = try await CLIProcess.run(["inspect", tokenPath], in: partial.scratch.url)
        #expect(inspected.exitCode == 65, "\(inspected)")
        #expect(inspected.stderr.hasPrefix("error: "))

        let resumed = try await CLIProcess.run(["resume", tokenPath], in: partial.scratch.url)
        #expect(resumed.exitCode == 65, "\(resumed)")
        #expect(resumed.stderr.contains("error: "))
        #expect(partial.scratch.contents() == before)
        #expect((try? Data(contentsOf: URL(fileURLWithPath: tokenPath))) == tokenBytes)
        #expect(partial.served.server.requests(for: partial.served.path).count == 1, "no request was made")

        let json = try await CLIProcess.run(["resume", tokenPath, "--json"], in: partial.scratch.url)
        #expect(json.exitCode == 65)
        #expect(try jsonObject(json.stdout)["status"] as? String == "failed")
    }

    @Test("resume with a wrong --sha256 exits with 1 and removes the partial file and the token")
    func resumeChecksumMismatch() async throws {
        let partial = try await PartialDownload()
        let result = try await CLIProcess.run(
            ["resume", partial.tokenURL.path, "--sha256", String(repeating: "a", count: 64)], in: partial.scratch.url)
        #expect(result.exitCode == 1, "\(result)")
        #expect(partial.scratch.contents().isEmpty)
    }

    @Test("resume --url continues from a new URL for the same content")
    func resumeWithReplacementURL() async throws {
        let partial = try await PartialDownload()
        let served = partial.served
        let resource = try #require(served.server.resource(at: served.path))
        served.server.register(resource, at: "/mirror.bin")
        served.server.removeResource(at: served.path)
        let mirror = served.server.url(for: "/mirror.bin").absoluteString
        let result = try await CLIProcess.run(
            ["resume", partial.tokenURL.path, "--url", mirror, "--json"], in: partial.scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        #expect(served.server.requests(for: "/mirror.bin").map { $0.header("Range") } == ["bytes=100000-"])
        try expectSameBytes(Data(contentsOf: partial.scratch.file("file.bin")), served.bytes)
    }

    @Test("resume of a token whose temporary file is gone needs -o; with it, it starts over and still finishes")
    func resumeWithoutTemporaryFile() async throws {
        let partial = try await PartialDownload()
        try FileManager.default.removeItem(atPath: partial.token.tempPath)
        let refused = try await CLIProcess.run(["resume", partial.tokenURL.path], in: partial.scratch.url)
        #expect(refused.exitCode == 65, "\(refused)")
        #expect(refused.stderr.contains("-o PATH"), "the message says what to do: \(refused.stderr)")
        #expect(partial.scratch.contents() == [partial.tokenURL.lastPathComponent])
        let result = try await CLIProcess.run(
            ["resume", partial.tokenURL.path, "-o", partial.scratch.url.path + "/"], in: partial.scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        #expect(result.stderr.contains("missing or empty"), "a clear note says why it starts over: \(result.stderr)")
        try expectSameBytes(Data(contentsOf: partial.scratch.file("file.bin")), partial.served.bytes)
        #expect(partial.scratch.contents() == ["file.bin"])
    }

    @Test(
        "inspect runs exactly the checks resume runs: it never calls consistent a token that resume refuses",
        arguments: ["hard link", "misplaced", "in use", "finished"])
    func inspectAgreesWithResume(situation: String) async throws {
        let partial = try await PartialDownload()
        var holder: FileHandle?
        var expected: Int32 = 65
        switch situation {
        case "hard link":
            #expect(link(partial.token.tempPath, partial.scratch.file("elsewhere").path) == 0)
        case "misplaced":
            let other = partial.scratch.file("other")
            try FileManager.default.createDirectory(at: other, withIntermediateDirectories: true)
            let moved = other.appendingPathComponent((partial.token.tempPath as NSString).lastPathComponent).path
            try FileManager.default.moveItem(atPath: partial.token.tempPath, toPath: moved)
            try partial.rewriteToken { $0["tempPath"] = moved }
        case "in use":
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: partial.token.tempPath))
            #expect(flock(handle.fileDescriptor, LOCK_EX | LOCK_NB) == 0)
            holder = handle
            expected = 75
        default:
            // What a crash right after the finished file was moved leaves: a complete token, no temporary file,
            // the finished file in place.
            try FileManager.default.removeItem(atPath: partial.token.tempPath)
            try partial.rewriteToken { $0["offset"] = 262_144 }
            try Data(partial.served.bytes).write(to: partial.scratch.file("file.bin"))
        }
        let inspected = try await CLIProcess.run(["inspect", "--json", partial.tokenURL.path], in: partial.scratch.url)
        let resumed = try await CLIProcess.run(["resume", partial.tokenURL.path, "-q"], in: partial.scratch.url)
        #expect(inspected.exitCode == expected, "\(inspected)")
        #expect(resumed.exitCode == expected, "\(resumed)")
        let state = (try jsonObject(inspected.stdout)["temporaryFile"] as? [String: Any])?["state"] as? String
        #expect(state == (situation == "finished" ? "finished" : "refused"))
        #expect(partial.scratch.contents().contains("file.bin") == (situation == "finished"), "nothing downloaded")
        #expect(!partial.scratch.contents().contains("file (1).bin"))
        try holder?.close()
    }
}
