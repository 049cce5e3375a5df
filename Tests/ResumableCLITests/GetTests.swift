import Foundation
import LoopbackServer
import Resumable
import Testing

/// `resumable get` against an in-process loopback server, run as a real subprocess.
@Suite("get")
struct GetTests {
    @Test("A download saves the file under the server's name, prints its path and leaves nothing else")
    func plainDownload() async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(["get", served.url], in: scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        #expect(result.stdoutLines == [scratch.file("file.bin").path])
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
        #expect(scratch.contents() == ["file.bin"])
        #expect(result.stderr.contains("Saved"))
    }

    @Test("-o with an existing directory keeps the server's name; -o with another path is the exact file")
    func outputDirectoryAndFile() async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        let directory = try scratch.subdirectory("into")

        let intoDirectory = try await CLIProcess.run(["get", served.url, "-o", "into"], in: scratch.url)
        #expect(intoDirectory.exitCode == 0, "\(intoDirectory)")
        #expect(scratch.contents(of: directory) == ["file.bin"])

        let exact = try await CLIProcess.run(["get", served.url, "--output", "into/renamed.dat"], in: scratch.url)
        #expect(exact.exitCode == 0, "\(exact)")
        #expect(scratch.contents(of: directory) == ["file.bin", "renamed.dat"])
        try expectSameBytes(Data(contentsOf: directory.appendingPathComponent("renamed.dat")), served.bytes)

        let trailingSlash = try await CLIProcess.run(["get", served.url, "-o", "missing/"], in: scratch.url)
        #expect(trailingSlash.exitCode == 1, "a trailing '/' means a directory, which must exist: \(trailingSlash)")
    }

    @Test("An existing file gets a free name by default and is replaced with --overwrite")
    func existingFiles() async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        try Data("old".utf8).write(to: scratch.file("file.bin"))

        let free = try await CLIProcess.run(["get", served.url, "--quiet"], in: scratch.url)
        #expect(free.exitCode == 0, "\(free)")
        #expect(free.stdoutLines == [scratch.file("file (1).bin").path])
        #expect(free.stderr.isEmpty, "--quiet prints nothing on success")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), Data("old".utf8))

        let replaced = try await CLIProcess.run(["get", served.url, "--overwrite", "-q"], in: scratch.url)
        #expect(replaced.exitCode == 0, "\(replaced)")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
    }

    @Test("A 404 exits with 1 and leaves no file, no temporary file and no token")
    func notFound() async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        let missing = served.server.url(for: "/missing.bin").absoluteString
        let result = try await CLIProcess.run(["get", missing], in: scratch.url)
        #expect(result.exitCode == 1, "\(result)")
        #expect(result.stderr.contains("404"))
        #expect(scratch.contents().isEmpty)
    }

    @Test("A SHA-256 mismatch exits with 1 and leaves nothing; a matching SHA-256 is verified")
    func checksum() async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        let wrong = String(repeating: "0", count: 64)
        let mismatch = try await CLIProcess.run(["get", served.url, "--sha256", wrong], in: scratch.url)
        #expect(mismatch.exitCode == 1, "\(mismatch)")
        #expect(mismatch.stderr.contains("SHA-256"))
        #expect(scratch.contents().isEmpty)

        var digest = PortableSHA256()
        digest.update(served.bytes)
        let expected = digest.hexDigest()
        let match = try await CLIProcess.run(["get", served.url, "--sha256", expected.uppercased()], in: scratch.url)
        #expect(match.exitCode == 0, "\(match)")
        #expect(match.stderr.contains("SHA-256 verified: \(expected)"))
        #expect(scratch.contents() == ["file.bin"])
    }

    @Test(
        "--transport chooses how bytes move, and the result says which one did", arguments: ["libcurl", "urlsession"])
    func transportOption(name: String) async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(["get", served.url, "--json", "--transport", name], in: scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        let object = try jsonObject(result.stdout)
        #expect((object["transport"] as? String)?.lowercased() == name)
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
        let wrong = try await CLIProcess.run(["get", served.url, "--transport", "carrier-pigeon"], in: scratch.url)
        #expect(wrong.exitCode == 64, "\(wrong)")
    }

    @Test("--json prints one result object on stdout and only JSON event lines on stderr")
    func jsonOutput() async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(["get", served.url, "--json"], in: scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        #expect(result.stdoutLines.count == 1)
        let object = try jsonObject(result.stdout)
        #expect(object["status"] as? String == "completed")
        #expect(object["path"] as? String == scratch.file("file.bin").path)
        #expect((object["bytes"] as? NSNumber)?.int64Value == served.length)
        #expect((object["resumedFrom"] as? NSNumber)?.int64Value == 0)
        #expect(object["restarted"] as? Bool == false)
        #expect(object["mimeType"] as? String == "application/octet-stream")
        #expect((object["httpStatus"] as? NSNumber)?.intValue == 200)
        #expect((object["exitCode"] as? NSNumber)?.intValue == 0)
        let events = try result.stderrLines.map { try jsonObject($0)["event"] as? String }
        // `started` is not required: the library may send it before the CLI can subscribe (cli-requests.md).
        #expect(events.contains("progress"))
        #expect(events.last == "finished")
        #expect(events.allSatisfy { $0 != nil })

        let failure = try await CLIProcess.run(
            ["get", served.server.url(for: "/nope").absoluteString, "--json", "--quiet"], in: scratch.url)
        #expect(failure.exitCode == 1)
        #expect(failure.stderr.isEmpty)
        let failed = try jsonObject(failure.stdout)
        #expect(failed["status"] as? String == "failed")
        let error = failed["error"] as? [String: Any]
        #expect(error?["code"] as? String == "httpStatus")
        #expect((error?["httpStatus"] as? NSNumber)?.intValue == 404)
    }

    @Test("Request headers given with -H reach the server")
    func headers() async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(
            ["get", served.url, "-H", "X-Trace: abc 123", "--header=Accept: application/octet-stream", "-q"],
            in: scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        let request = served.server.requests(for: served.path).first
        #expect(request?.header("X-Trace") == "abc 123")
        #expect(request?.header("Accept") == "application/octet-stream")
    }

    @Test("A dropped connection without retries exits with 75 and leaves a token that resume completes")
    func transientFailureLeavesToken() async throws {
        let served = try ServedFile(behavior: Behavior(dropAfterBytes: 100_000))
        let scratch = try ScratchDirectory()
        let failed = try await CLIProcess.run(["get", served.url, "--retries", "0"], in: scratch.url)
        #expect(failed.exitCode == 75, "\(failed)")
        let tokenPath = scratch.file("file.bin.resumable.json").path
        #expect(failed.stderr.contains("resumable resume \(tokenPath)"))
        #expect(FileManager.default.fileExists(atPath: tokenPath))
        #expect(scratch.partialFiles().count == 1)

        served.setBehavior(.normal)
        let resumed = try await CLIProcess.run(["resume", tokenPath, "--json"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        let object = try jsonObject(resumed.stdout)
        #expect((object["resumedFrom"] as? NSNumber)?.int64Value == 100_000)
        #expect(served.ranges.last == "bytes=100000-")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
        #expect(scratch.contents() == ["file.bin"])
    }

    @Test("A 503 before any data, without retries, exits with 75 and leaves nothing")
    func serviceUnavailable() async throws {
        let served = try ServedFile(behavior: Behavior(status: 503))
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(["get", served.url, "--retries", "0", "--json"], in: scratch.url)
        #expect(result.exitCode == 75, "\(result)")
        let object = try jsonObject(result.stdout)
        #expect((object["error"] as? [String: Any])?["transient"] as? Bool == true)
        #expect(object["token"] is NSNull)
        #expect(scratch.contents().isEmpty)
    }

    @Test("--token puts the resume token at the given path")
    func explicitTokenPath() async throws {
        let served = try ServedFile(behavior: Behavior(dropAfterBytes: 50_000))
        let scratch = try ScratchDirectory()
        let tokens = try scratch.subdirectory("tokens")
        let result = try await CLIProcess.run(
            ["get", served.url, "--retries", "0", "--token", "tokens/t.json", "-q"], in: scratch.url)
        #expect(result.exitCode == 75, "\(result)")
        #expect(scratch.contents(of: tokens) == ["t.json"])
        #expect(!scratch.contents().contains("file.bin.resumable.json"))
    }

    @Test("Running get again instead of resume keeps the earlier download's token and says where this one's goes")
    func getAgainKeepsEarlierToken() async throws {
        let served = try ServedFile(behavior: Behavior(dropAfterBytes: 100_000))
        let scratch = try ScratchDirectory()
        let first = try await CLIProcess.run(["get", served.url, "--retries", "0", "-q"], in: scratch.url)
        #expect(first.exitCode == 75, "\(first)")
        let earlierPartial = try #require(scratch.partialFiles().first)
        let earlierToken = try Data(contentsOf: scratch.file("file.bin.resumable.json"))

        // The warning comes with the second download's first checkpoint: the gate keeps the download from
        // finishing before it (a small file could otherwise end before any checkpoint).
        let gate = served.holdBody(after: 16 * 1024)
        let running = try CLIProcess(["get", served.url, "--timeout", "3600"], in: scratch.url)
        let warned = try await trickle(gate, bodyLength: served.length) {
            running.stderrSoFar.contains("keeps its resume token")
        }
        #expect(warned, "\(gate) \(running.stderrSoFar)")
        #expect(running.stderrSoFar.contains("file.bin.2.resumable.json"), "\(running.stderrSoFar)")
        gate.open()
        let second = try await running.finish()
        #expect(second.exitCode == 0, "\(second)")
        // The earlier download is still resumable: its token and its partial file are untouched; the second
        // download's token went away when it finished.
        #expect(try Data(contentsOf: scratch.file("file.bin.resumable.json")) == earlierToken)
        #expect(scratch.contents() == [earlierPartial, "file.bin", "file.bin.resumable.json"])
        let resumed = try await CLIProcess.run(["resume", "file.bin.resumable.json", "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        try expectSameBytes(Data(contentsOf: scratch.file("file (1).bin")), served.bytes, "\(scratch.contents())")
    }
}
