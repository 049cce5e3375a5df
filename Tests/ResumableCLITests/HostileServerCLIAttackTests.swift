import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review through the `resumable` binary: hostile servers and names, with both transports. Each test
/// also checks that nothing appears outside the output directory.
@Suite("Hostile servers through the CLI")
struct HostileServerCLIAttackTests {
    /// The parent of the output directory, listed before and after: nothing may appear there.
    private struct Sandbox {
        let scratch: ScratchDirectory
        let output: URL
        let before: [String]

        init() throws {
            scratch = try ScratchDirectory()
            output = try scratch.subdirectory("out")
            before = scratch.contents()
        }

        func expectNothingOutside(sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(scratch.contents() == before, "written beside the output directory", sourceLocation: sourceLocation)
        }
    }

    /// `resumable get` cut at 50 bytes, then `resumable resume` against a 206 `bytes 50-149/*` carrying the stored
    /// ETag: the CLI exits 0 with a 150-byte file for a 100-byte download (see `HostileServerAttackTests`, finding 1:
    /// `ResumeStateMachine.receivePartial` skips the complete-length check for `/*`, `responseEnded` finishes on
    /// `offset >= expectedLength`, and `DownloadEngine.finish` never compares the size with the expected length).
    @Test(
        "resume: a 206 running past the announced length never becomes a longer finished file",
        arguments: ["libcurl", "urlsession"])
    func partialPastKnownLength(transport: String) async throws {
        let sandbox = try Sandbox()
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let content = Resource.generatedBytes(seed: 3, range: 0..<100)
        server.register(.bytes(content), at: "/file.bin")
        server.enqueue(behavior: Behavior(dropAfterBytes: 50), for: "/file.bin")
        let url = server.url(for: "/file.bin").absoluteString
        let first = try await CLIProcess.run(
            ["get", url, "-o", sandbox.output.path + "/", "--retries", "0", "-q", "--transport", transport],
            in: sandbox.scratch.url)
        try #require(first.exitCode == 75, "\(first)")
        let tokenURL = sandbox.output.appendingPathComponent("file.bin.resumable.json")
        let token = try ResumeToken(contentsOf: tokenURL)
        let etag = try #require(token.etag)
        server.enqueue(
            ScriptedResponse(
                status: 206,
                headers: [
                    HeaderField("Content-Range", "bytes 50-149/*"), HeaderField("Content-Length", "100"),
                    HeaderField("ETag", etag),
                ],
                body: Array(content[50...]) + Resource.generatedBytes(seed: 4, range: 0..<50)),
            for: "/file.bin")
        let resumed = try await CLIProcess.run(
            ["resume", tokenURL.path, "--retries", "1", "-q", "--transport", transport], in: sandbox.scratch.url)
        let finished = sandbox.output.appendingPathComponent("file.bin")
        if resumed.exitCode == 0 {
            let bytes = [UInt8](try Data(contentsOf: finished))
            #expect(bytes.count == 100, "exit 0 with \(bytes.count) bytes of a 100-byte file")
            #expect(bytes.starts(with: content))
        } else {
            #expect(resumed.signal == nil, "\(resumed)")
            #expect(!FileManager.default.fileExists(atPath: finished.path), "no finished file after a failure")
        }
        sandbox.expectNothingOutside()
    }

    /// `resumable get` against a server that answers every plain GET with `206 bytes 0-49/100` and no validator: the
    /// download starts over without bound (see `HostileServerAttackTests`, finding 2). 40 answers are queued, then
    /// the server answers 404; the CLI uses all of them instead of giving up with a clear error.
    @Test(
        "get: a short 206 without validators on every request ends with an error after a bounded number of requests",
        arguments: ["libcurl", "urlsession"])
    func shortPartialLoop(transport: String) async throws {
        let sandbox = try Sandbox()
        let server = try LoopbackServer()
        defer { server.shutdown() }
        for _ in 0..<40 {
            server.enqueue(
                ScriptedResponse(
                    status: 206,
                    headers: [HeaderField("Content-Range", "bytes 0-49/100"), HeaderField("Content-Length", "50")],
                    body: Resource.generatedBytes(seed: 5, range: 0..<50)),
                for: "/file.bin")
        }
        let result = try await CLIProcess.run(
            [
                "get", server.url(for: "/file.bin").absoluteString, "-o", sandbox.output.path + "/", "--retries", "2",
                "-q", "--transport", transport,
            ],
            in: sandbox.scratch.url)
        #expect(result.exitCode != 0, "\(result)")
        #expect(result.signal == nil, "\(result)")
        let requests = server.requests(for: "/file.bin").count
        #expect(requests <= 15, "\(requests) requests for one download")
        #expect(!sandbox.scratch.contents(of: sandbox.output).contains("file.bin"))
        sandbox.expectNothingOutside()
    }

    /// A dangling symbolic link in the output directory under the name the server suggests, pointing outside it.
    /// Nothing is written through it (rename replaces no link here); but `Finisher.moveIntoPlace` only looks for a
    /// free name when `FileManager.fileExists(atPath:)` — which follows the link — says the name is taken, so the
    /// `EEXIST` of the no-replace rename becomes a failure (exit 74) instead of `file (1).bin`.
    @Test(
        "get: a dangling symlink at the suggested name is never written through, and a free name is chosen",
        arguments: ["libcurl", "urlsession"])
    func danglingSymlink(transport: String) async throws {
        let sandbox = try Sandbox()
        let served = try ServedFile(length: 10_000)
        let victim = sandbox.scratch.file("victim")
        #expect(symlink(victim.path, sandbox.output.appendingPathComponent("file.bin").path) == 0)
        let result = try await CLIProcess.run(
            ["get", served.url, "-o", sandbox.output.path + "/", "-q", "--transport", transport],
            in: sandbox.scratch.url)
        #expect(!FileManager.default.fileExists(atPath: victim.path), "written through the link")
        #expect(result.exitCode == 0, "\(result)")
        if result.exitCode == 0 {
            try expectSameBytes(Data(contentsOf: sandbox.output.appendingPathComponent("file (1).bin")), served.bytes)
        }
        sandbox.expectNothingOutside()
    }

    /// Rule broken: "nothing downloaded is lost without need".
    ///
    /// The token file's default path is `<directory>/<suggested name>.resumable.json`, and the suggested name is the
    /// server's (`TokenFile.defaultURL`). An unfinished download Y left `a.bin.resumable.json`; an unrelated download
    /// X from another server that also names its file `a.bin` is cut too, and `TokenFile.write` replaces Y's token
    /// with X's (it only refuses when Y is running, and warns). Y's partial file stays on disk, but no token names
    /// it any more: it can never be resumed, nor is it ever cleaned up.
    @Test(
        "get: another server's download that suggests the same name never replaces an unfinished download's token",
        arguments: ["libcurl", "urlsession"])
    func sameSuggestedNameReplacesToken(transport: String) async throws {
        let sandbox = try Sandbox()
        let first = try LoopbackServer()
        defer { first.shutdown() }
        let second = try LoopbackServer()
        defer { second.shutdown() }
        for (server, seed) in [(first, UInt64(1)), (second, UInt64(2))] {
            server.register(
                .bytes(
                    Resource.generatedBytes(seed: seed, range: 0..<10_000),
                    contentDisposition: "attachment; filename=\"a.bin\""),
                at: "/\(seed).bin")
            server.enqueue(behavior: Behavior(dropAfterBytes: 5000), for: "/\(seed).bin")
        }
        let arguments = ["-o", sandbox.output.path + "/", "--retries", "0", "-q", "--transport", transport]
        let cutY = try await CLIProcess.run(
            ["get", first.url(for: "/1.bin").absoluteString] + arguments, in: sandbox.scratch.url)
        try #require(cutY.exitCode == 75, "\(cutY)")
        let tokenY = try ResumeToken(contentsOf: sandbox.output.appendingPathComponent("a.bin.resumable.json"))
        let cutX = try await CLIProcess.run(
            ["get", second.url(for: "/2.bin").absoluteString] + arguments, in: sandbox.scratch.url)
        #expect(cutX.exitCode == 75, "\(cutX)")
        #expect(FileManager.default.fileExists(atPath: tokenY.tempPath), "Y's partial file is still there")
        let tokens = sandbox.scratch.contents(of: sandbox.output).filter { $0.hasSuffix(".resumable.json") }.compactMap
        {
            try? ResumeToken(contentsOf: sandbox.output.appendingPathComponent($0))
        }
        #expect(
            tokens.contains { $0.tempPath == tokenY.tempPath },
            "no token names Y's partial file any more: \(cutX.stderr)")
        sandbox.expectNothingOutside()
    }
}
