import Foundation
import Testing

@testable import ResumableCLI

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `resumable serve` and `resumable demo`.
@Suite("serve and demo")
struct ServeAndDemoTests {
    @Test(
        "serve lists the URL of every file, serves them to get, and exits with 0 on SIGINT and SIGTERM",
        arguments: [SIGINT, SIGTERM])
    func serve(signal: Int32) async throws {
        let scratch = try ScratchDirectory()
        let root = try scratch.subdirectory("root")
        let nested = try scratch.subdirectory("root/sub")
        let content = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try content.write(to: root.appendingPathComponent("a b.bin"))
        try Data("hello".utf8).write(to: nested.appendingPathComponent("c#1.txt"))
        let downloads = try scratch.subdirectory("downloads")

        let server = try CLIProcess(["serve", "root", "--throttle", "8M"], in: scratch.url)
        let listed = try await eventually { server.stdoutSoFar.split(separator: "\n").count >= 3 }
        #expect(listed, "\(server.stdoutSoFar) \(server.stderrSoFar)")
        let lines = server.stdoutSoFar.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("http://127.0.0.1:") == true)
        let fileLine = try #require(lines.first { $0.contains("a%20b.bin") })
        #expect(fileLine.hasSuffix("\t300000"))
        let hashLine = try #require(lines.first { $0.contains("/sub/c%231.txt\t5") })
        let url = String(fileLine.split(separator: "\t")[0])

        let fetched = try await CLIProcess.run(["get", url, "-o", "downloads/", "-q"], in: scratch.url)
        #expect(fetched.exitCode == 0, "\(fetched)")
        try expectSameBytes(Data(contentsOf: downloads.appendingPathComponent("a b.bin")), content)

        let hashURL = String(hashLine.split(separator: "\t")[0])
        let hashFetched = try await CLIProcess.run(["get", hashURL, "-o", "downloads/hash.txt", "-q"], in: scratch.url)
        #expect(hashFetched.exitCode == 0, "\(hashFetched)")
        #expect(try Data(contentsOf: downloads.appendingPathComponent("hash.txt")) == Data("hello".utf8))

        server.send(signal)
        let stopped = try await server.finish()
        #expect(stopped.exitCode == 0, "\(stopped)")
    }

    @Test("serve --drop-after cuts every connection, and get still finishes the file one range at a time")
    func serveDropAfter() async throws {
        let scratch = try ScratchDirectory()
        let root = try scratch.subdirectory("root")
        let content = Data((0..<250_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) })
        try content.write(to: root.appendingPathComponent("flaky.bin"))
        _ = try scratch.subdirectory("downloads")

        let server = try CLIProcess(["serve", "root", "--drop-after", "100000"], in: scratch.url)
        let listed = try await eventually { server.stdoutSoFar.split(separator: "\n").count >= 2 }
        #expect(listed, "\(server.stdoutSoFar) \(server.stderrSoFar)")
        let lines = server.stdoutSoFar.split(separator: "\n").map(String.init)
        let fileLine = try #require(lines.first { $0.contains("flaky.bin") })
        let url = String(fileLine.split(separator: "\t")[0])

        let fetched = try await CLIProcess.run(["get", url, "-o", "downloads/", "--json"], in: scratch.url)
        #expect(fetched.exitCode == 0, "\(fetched)")
        try expectSameBytes(Data(contentsOf: scratch.url.appendingPathComponent("downloads/flaky.bin")), content)
        let retries = fetched.stderr.split(separator: "\n").filter { $0.contains("\"event\":\"retry\"") }
        #expect(retries.count == 2, "cut at 100000 and 200000: \(fetched.stderr)")

        server.send(SIGINT)
        let stopped = try await server.finish()
        #expect(stopped.exitCode == 0, "\(stopped)")
    }

    /// A served download directory holds a batch's `.resumable-state` (tokens naming absolute paths) and dotfiles:
    /// `serve` must neither list nor serve them, while a token file beside its download is an ordinary file.
    @Test("serve neither lists nor serves hidden files or directories, and still serves the rest")
    func serveHidesDotfiles() async throws {
        let scratch = try ScratchDirectory()
        let root = try scratch.subdirectory("root")
        _ = try scratch.subdirectory("root/sub/.x")
        _ = try scratch.subdirectory("root/.resumable-state")
        _ = try scratch.subdirectory("downloads")
        let secret = Data("secret\n".utf8)
        for name in [".hidden", "sub/.x/file", ".resumable-state/a.bin.resumable.json"] {
            try secret.write(to: root.appendingPathComponent(name))
        }
        try Data("visible".utf8).write(to: root.appendingPathComponent("a.bin"))
        try Data("{}".utf8).write(to: root.appendingPathComponent("a.bin.resumable.json"))
        try #require(symlink(".resumable-state/a.bin.resumable.json", root.path + "/link") == 0)

        let server = try CLIProcess(["serve", "root"], in: scratch.url)
        // The note on standard error comes after the whole listing.
        let started = try await eventually { server.stderrSoFar.contains("Press Ctrl-C") }
        try #require(started, "\(server.stdoutSoFar) \(server.stderrSoFar)")
        let lines = server.stdoutSoFar.split(separator: "\n").map(String.init)
        let base = try #require(lines.first)
        let listed = lines.dropFirst().map { $0.dropFirst(base.count).split(separator: "\t")[0] }
        #expect(listed == ["a.bin", "a.bin.resumable.json"], "\(lines)")

        for path in [".hidden", "sub/.x/file", ".resumable-state/a.bin.resumable.json", "%2Ehidden", "link"] {
            let fetched = try await CLIProcess.run(
                ["get", base + path, "-o", "downloads/got", "-q", "--retries", "0"], in: scratch.url)
            #expect(fetched.exitCode == 1 && fetched.stderr.contains("404"), "\(path): \(fetched)")
            #expect(!FileManager.default.fileExists(atPath: scratch.url.path + "/downloads/got"), "\(path)")
        }
        let visible = try await CLIProcess.run(["get", base + "a.bin", "-o", "downloads/a.bin", "-q"], in: scratch.url)
        #expect(visible.exitCode == 0, "\(visible)")
        #expect(try Data(contentsOf: scratch.url.appendingPathComponent("downloads/a.bin")) == Data("visible".utf8))

        server.send(SIGINT)
        let stopped = try await server.finish()
        #expect(stopped.exitCode == 0, "\(stopped)")
    }

    /// `serve` runs until stopped; a server that recorded every request (as the tests' servers do) would grow
    /// without bound.
    @Test("serve's server keeps no record of the requests it answers")
    func serveRecordsNothing() throws {
        let scratch = try ScratchDirectory()
        _ = try scratch.subdirectory("root")
        guard
            case .arguments(let parsed) = try ArgumentParser.parse([scratch.url.path + "/root"], for: ServeCommand.spec)
        else {
            Issue.record("no arguments parsed")
            return
        }
        let command = try ServeCommand(arguments: parsed)
        #expect(!command.serverConfiguration.recordsRequests)
        #expect(command.serverConfiguration.host == "127.0.0.1")
    }

    @Test("demo pauses a download, finishes it in a second process, verifies it and exits with 0")
    func demo() async throws {
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(["demo"], in: scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        #expect(result.stdout.contains("Paused with"))
        #expect(result.stdout.contains("\"offset\""), "the token is printed")
        #expect(result.stdout.contains("resume"))
        #expect(result.stdout.contains("Verified: identical to the source"))
        #expect(scratch.contents().isEmpty)
    }
}
