import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review of the token path loop (ad8fbf9, 1dbc533: a file that is not a token is never replaced) and of
/// the remaining places where canonical equivalence makes two byte-different paths one (38ee910).
@Suite("Token path attack: what lies at a token path, and look-alike roots")
struct TokenPathAttackTests {
    /// The file type of whatever has the name `path` (symbolic links not followed), or `nil` when nothing has.
    static func fileType(_ path: String) -> mode_t? {
        var status = stat()
        guard lstat(path, &status) == 0 else { return nil }
        return status.st_mode & S_IFMT
    }

    /// Rule broken: a file that is not a token is never replaced (1dbc533: "--token refuses it (exit 65) unless it
    /// is empty").
    ///
    /// `TokenFile.write` decides "empty" from `lstat`'s `st_size` (`existingFileSize`, TokenFile.swift:164), which is
    /// 0 for a FIFO, a socket or a device as well as for an empty regular file. So `--token` naming a FIFO (a pipe
    /// another program reads, `mkfifo`) counts as "the empty file the user named", `AtomicFile.write` renames the
    /// token over it, and when the download succeeds `endCompleted` removes the token: the FIFO is gone. As root, the
    /// same happens to a device node.
    @Test("get --token FIFO: a named pipe is not a token and is never replaced (nor removed)")
    func tokenOptionNamesAFIFO() async throws {
        let scratch = try ScratchDirectory()
        let output = try scratch.subdirectory("out")
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let bytes = Resource.generatedBytes(seed: 91, range: 0..<50_000)
        server.register(.bytes(bytes), at: "/a.bin")
        let fifo = scratch.file("token.fifo")
        try #require(mkfifo(fifo.path, 0o600) == 0, "mkfifo: \(String(cString: strerror(errno)))")

        let result = try await CLIProcess.run(
            [
                "get", server.url(for: "/a.bin").absoluteString, "-o", output.path + "/a.bin", "--token", fifo.path,
                "-q", "--retries", "0", "--transport", "libcurl",
            ], in: scratch.url)
        // Either outcome is fine for the download (refused with 65, or done): the pipe must still be a pipe.
        #expect(
            Self.fileType(fifo.path) == S_IFIFO,
            "the FIFO named by --token was replaced (exit \(String(describing: result.exitCode))): now \(Self.fileType(fifo.path).map { String($0, radix: 8) } ?? "nothing") at \(fifo.path); \(result)"
        )
        if result.exitCode == 0 {
            try expectSameBytes(Data(contentsOf: output.appendingPathComponent("a.bin")), Data(bytes))
        }
    }

    /// Rule broken: a finished file is never deleted or overwritten by the tool.
    ///
    /// `TokenFile.write` looks at what lies at the token path only at the first write (`if state.lastToken == nil`,
    /// TokenFile.swift:117); every later checkpoint, and the final token, are renamed over the path whatever is there
    /// by then. A second `get --overwrite` whose server names its file `a.bin.resumable.json` finishes into the
    /// directory (it replaces the running download's token: what that user asked for). The running download's next
    /// checkpoint then writes its token over that finished file, and when it succeeds `endCompleted` removes "its"
    /// token: the other download's finished file is gone, though nobody asked for it to be replaced.
    @Test("get: a later checkpoint never writes over a finished file that took the token's place")
    func laterCheckpointOverFinishedFile() async throws {
        let scratch = try ScratchDirectory()
        let output = try scratch.subdirectory("out")
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let other = try LoopbackServer()
        defer { other.shutdown() }
        let length: Int64 = 600_000
        let wanted = Resource.generatedBytes(seed: 92, range: 0..<length)
        let gate = BodyGate(holdingAfter: 100_000)
        server.register(.bytes(wanted, behavior: Behavior(gate: gate)), at: "/a.bin")
        let reportBytes = Resource.generatedBytes(seed: 93, range: 0..<20_000)
        other.register(
            .bytes(reportBytes, contentDisposition: "attachment; filename=\"a.bin.resumable.json\""), at: "/report")
        let tokenURL = output.appendingPathComponent("a.bin.resumable.json")

        let first = try await CLIProcess.start(
            [
                "get", server.url(for: "/a.bin").absoluteString, "-o", output.path + "/", "-q", "--retries", "0",
                "--transport", "libcurl",
            ], in: scratch.url)
        try #require(await gate.waitUntilHeld(timeout: CLIProcess.deadline), "\(gate)")
        let tokenWritten = try await trickle(gate, bodyLength: length) { (tokenOffset(at: tokenURL) ?? 0) > 0 }
        try #require(tokenWritten, "no token with bytes at \(tokenURL.path): \(scratch.contents(of: output))")

        let report = try await CLIProcess.run(
            [
                "get", other.url(for: "/report").absoluteString, "-o", output.path + "/", "--overwrite", "-q",
                "--retries", "0", "--transport", "libcurl",
            ], in: scratch.url)
        try #require(report.exitCode == 0, "\(report)")
        try #require(try Data(contentsOf: tokenURL) == Data(reportBytes))

        // Bytes flow again until the next checkpoint: it cannot go to the finished file, so it goes beside it, to the
        // next numbered name (before the fix it went over the finished file).
        let besideURL = output.appendingPathComponent("a.bin.2.resumable.json")
        // Small steps, so that bytes keep arriving across several checkpoint intervals (a second each).
        let checkpointedBeside = try await trickle(gate, bodyLength: length, step: 1024) {
            tokenOffset(at: besideURL) != nil || (try? Data(contentsOf: tokenURL)) != Data(reportBytes)
        }
        #expect(checkpointedBeside, "no later checkpoint: \(scratch.contents(of: output))")
        gate.open()
        let done = try await first.finish()
        #expect(done.exitCode == 0, "\(done)")
        try expectSameBytes(Data(contentsOf: output.appendingPathComponent("a.bin")), Data(wanted))
        #expect(
            (try? Data(contentsOf: tokenURL)) == Data(reportBytes),
            "the finished file 'a.bin.resumable.json' was overwritten by the running download's token, then removed: \(scratch.contents(of: output))"
        )
    }

    /// Rule broken: never a read or write outside the place the user chose (`serve DIR` serves DIR only).
    ///
    /// `StaticFileResolver.resolve` (Sources/LoopbackServer/StaticFileResolver.swift) refuses a symbolic link that
    /// leaves the root with `resolved.hasPrefix(rootReal + "/")`, a `String` comparison that holds canonically
    /// equivalent text equal. A root named `Cafe\u{301}` (e + combining accent) and a sibling directory `Caf\u{E9}`
    /// (one code point) are two directories on Linux, yet a link in the root to the sibling's file passes the check,
    /// and `serve` sends a file from outside the directory it was told to serve.
    @Test("serve: a symbolic link to a look-alike sibling directory's file is not served")
    func serveLookAlikeRoot() async throws {
        let scratch = try ScratchDirectory()
        let rootName = "Cafe\u{301}"
        let siblingName = "Caf\u{E9}"
        try #require(!rootName.utf8.elementsEqual(siblingName.utf8))
        try #require(mkdir(scratch.url.path + "/" + rootName, 0o700) == 0)
        try #require(mkdir(scratch.url.path + "/" + siblingName, 0o700) == 0)
        let secret = Data("outside the served directory\n".utf8)
        let secretPath = scratch.url.path + "/" + siblingName + "/secret.txt"
        try #require(FileManager.default.createFile(atPath: secretPath, contents: secret))
        try #require(symlink("../" + siblingName + "/secret.txt", scratch.url.path + "/" + rootName + "/link.txt") == 0)
        try #require(
            FileManager.default.createFile(
                atPath: scratch.url.path + "/" + rootName + "/inside.txt", contents: Data("inside\n".utf8)))
        let downloads = try scratch.subdirectory("downloads")

        let server = try CLIProcess(["serve", rootName], in: scratch.url)
        let listed = try await eventually { server.stdoutSoFar.split(separator: "\n").count >= 2 }
        try #require(listed, "\(server.stdoutSoFar) \(server.stderrSoFar)")
        let base = try #require(server.stdoutSoFar.split(separator: "\n").first.map(String.init))
        let fetched = try await CLIProcess.run(
            ["get", base + "link.txt", "-o", downloads.path + "/got.txt", "-q", "--retries", "0"], in: scratch.url)
        server.send(SIGINT)
        let stopped = try await server.finish()
        #expect(
            (try? Data(contentsOf: downloads.appendingPathComponent("got.txt"))) != secret,
            "serve \(rootName.debugDescription) sent \(secretPath.debugDescription), outside its root: \(fetched)")
        #expect(stopped.exitCode == 0, "\(stopped)")
    }
}
