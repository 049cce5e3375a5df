import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review (helper 51) of b3364ea, 4968f3f and 1592bca through the real binary.
@Suite("Session fixes under attack")
struct SessionFixesAttackTests {
    /// A state directory whose `adding` is a directory (not the empty file `get -i` makes): `get -i` took it for a
    /// list cut short by a crash, and `endAddition()` ignored that the unlink failed (EISDIR), so the downloads started
    /// with `adding` still there; once paused, `resume --state` refused the store and the same `get -i` cancelled the
    /// paused download, throwing its bytes away. Such a store is now refused by both (exit 65), before any request.
    @Test("A state directory whose 'adding' is not a regular file is refused by get -i and resume --state")
    func addingIsADirectory() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let state = try scratch.subdirectory("state")
        #expect(chmod(state.path, 0o700) == 0)
        #expect(mkdir(state.appendingPathComponent("adding").path, 0o700) == 0)
        server.register(.generated(length: 1000, seed: 51), at: "/f.bin")
        try Data((server.url(for: "/f.bin").absoluteString + "\n").utf8).write(to: scratch.file("list.txt"))

        let added = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "-q"], in: scratch.url)
        #expect(added.exitCode == 65, "\(added)")
        #expect(added.stderr.contains("adding"), "\(added.stderr)")
        let resumed = try await CLIProcess.run(["resume", "--state", "state", "-q"], in: scratch.url)
        #expect(resumed.exitCode == 65, "\(resumed)")
        #expect(server.requests(for: "/f.bin").isEmpty)
    }

    /// The `adding` mark says no download of the store started; a store whose mark is there although a download
    /// holds bytes (tampered with, or copied together from two stores) is refused by `get -i`, which would otherwise
    /// cancel those downloads and throw their bytes away.
    @Test("get -i never drops a download with bytes on disk because the store says a list was being added")
    func addingMarkBesideStartedDownload() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let partial = scratch.url.appendingPathComponent("state/partial")
        _ = try await PausedBatch.make(
            server: server, in: scratch, path: "/big.bin", seed: 53, state: "state", partialDirectory: partial)
        let before = PausedBatch.temporaryFiles(in: partial)
        try #require(before.values.contains(100_000), "\(before)")
        try Data().write(to: scratch.url.appendingPathComponent("state/adding"))

        let again = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "-q"], in: scratch.url)
        #expect(again.exitCode == 65, "\(again)")
        #expect(PausedBatch.temporaryFiles(in: partial) == before, "the paused download's bytes were dropped")
    }

    /// `TaskStore.forgetToken` removes the whole record when it cannot rewrite it, and the queue then writes the
    /// paused download back only "over a record the store holds": a download paused before its first byte disappears
    /// from the store, and the next `resume --state` calls the batch complete (exit 0, "0 left") with a line of the
    /// list never downloaded.
    ///
    /// Reproduction: a batch paused at 100,000 bytes of a file served without validators; the file changes on the
    /// server; `resume --state` cannot prove a join, so it switches to a new temporary file before it asks (the record
    /// on disk names it, 0 bytes) and waits for the new body (held at byte 0). The record's write sibling
    /// `tasks/ID.json.writing` is made a directory (any failure of that one write does the same: a full disk, an I/O
    /// error); SIGINT pauses the download before its first byte. (A 200 to an `If-Range` no longer switches before its
    /// first byte, rule 9a; this test first reached the state that way.)
    @Test("A paused download whose record cannot be rewritten when its token is forgotten is never lost from the store")
    func forgetTokenFailureLosesPausedDownload() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let state = scratch.url.appendingPathComponent("state")
        let partial = state.appendingPathComponent("partial")
        let tasks = state.appendingPathComponent("tasks")
        let path = "/changing.bin"
        _ = try await PausedBatch.make(
            server: server, in: scratch, path: path, seed: 52, state: "state", partialDirectory: partial,
            validators: false)
        let oldFiles = Set(PausedBatch.temporaryFiles(in: partial).keys)
        try #require(oldFiles.count == 1, "\(oldFiles)")

        // Another version of the file, held right after each response's head.
        let changed = Resource.generatedBytes(seed: 53, range: 0..<(1 << 20))
        let gate = BodyGate(holdingAfter: 0)
        server.register(.bytes(changed, behavior: Behavior(gate: gate)), at: path)
        let process = try await CLIProcess.start(["resume", "--state", "state"], in: scratch.url)
        // The record on disk names the new temporary file (the switch is recorded before the old file goes).
        let switched = try await eventually {
            let files = Set(PausedBatch.temporaryFiles(in: partial).keys)
            guard files.count == 1, files.isDisjoint(with: oldFiles), let name = files.first,
                let token = try? Self.onlyRecordToken(state), let temp = token["tempPath"] as? String
            else { return false }
            return temp.hasSuffix("/" + name) && gate.heldCount >= 1
        }
        try #require(switched, "\(PausedBatch.temporaryFiles(in: partial)) \(process.stderrSoFar)")
        let record = try #require(scratch.contents(of: tasks).first { $0.hasSuffix(".json") })
        // A record write under way has its own sibling there for an instant: made once it is gone.
        let made = try await eventually { mkdir(tasks.appendingPathComponent(record + ".writing").path, 0o700) == 0 }
        try #require(made, "\(scratch.contents(of: tasks))")
        process.send(SIGINT)
        let interrupted = try await process.finish()
        gate.open()
        #expect(interrupted.exitCode == 130, "\(interrupted)")
        rmdir(tasks.appendingPathComponent(record + ".writing").path)

        let listed = try await CLIProcess.run(["list", "--state", "state"], in: scratch.url)
        let resumed = try await CLIProcess.run(["resume", "--state", "state", "-q"], in: scratch.url)
        let out = scratch.url.appendingPathComponent("out/changing.bin")
        #expect(
            (try? Data(contentsOf: out)) == Data(changed),
            "the paused download left the store: resume --state exits \(resumed.exitCode) with no file\ninterrupted: \(interrupted)\nlist: \(listed)\nresume: \(resumed)"
        )
    }

    /// The token of the only record in `state/tasks`, as JSON.
    static func onlyRecordToken(_ state: URL) throws -> [String: Any] {
        try CrashAndHashAttackTests.onlyRecordToken(state)
    }

    /// 1592bca trims header values of SP and HTAB in the libcurl transport. A server whose `ETag` line carries
    /// optional whitespace after the tag (`ETag: "v" `, valid HTTP: RFC 9110 §5.5 OWS) is an unchanged file whose
    /// token should resume with a range request whichever transport wrote it. Here a token written by one transport
    /// is resumed by the other (a hand-off between processes, or `--transport` changed), or by the same one.
    @Test(
        "An ETag followed by optional whitespace resumes across transports (no restart of an unchanged file)",
        arguments: [
            (DownloadTask.Transport.urlSession, DownloadTask.Transport.libcurl),
            (.libcurl, .urlSession), (.libcurl, .libcurl), (.urlSession, .urlSession),
        ], ["\"v\" ", "\"v\"\t"])
    func etagWithTrailingWhitespaceAcrossTransports(
        transports: (DownloadTask.Transport, DownloadTask.Transport), rawTag: String
    ) async throws {
        let body = Resource.generatedBytes(seed: 54, range: 0..<100)
        let tag = Array(rawTag.utf8)
        let server = try RawScriptServer { head, index, send in
            if index == 0 {
                _ = send(RawScriptServer.head("200 OK", ["Content-Length: 100"], etag: tag) + body[0..<50])
                return .completed(0)
            }
            // A correct server: If-Range compared as a field value (without its optional whitespace).
            let ifRange = RawScriptServer.header("If-Range", in: head).map { value in
                Array(value.reversed().drop { $0 == 32 || $0 == 9 }.reversed())
            }
            if ifRange == Array("\"v\"".utf8),
                RawScriptServer.header("Range", in: head) == Array("bytes=50-".utf8)
            {
                _ = send(
                    RawScriptServer.head(
                        "206 Partial Content", ["Content-Range: bytes 50-99/100", "Content-Length: 50"], etag: tag)
                        + body[50...])
                return .completed(206)
            }
            _ = send(RawScriptServer.head("200 OK", ["Content-Length: 100"], etag: tag) + body)
            return .completed(200)
        }
        defer { server.stop() }
        let directory = try ScratchDirectory()
        let first = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: DownloadTask.Configuration(
                retry: .init(maximumRetries: 0), idleTimeout: .seconds(600), transport: transports.0))
        guard case .failure(let error) = await first.result, let token = error.resumeToken else {
            Issue.record("the first run left no token")
            return
        }
        let resumed = try DownloadTask.resume(
            from: token,
            configuration: DownloadTask.Configuration(
                retry: .init(maximumRetries: 1), idleTimeout: .seconds(600), transport: transports.1))
        let result = try await resumed.result.get()
        try expectSameBytes(Data(contentsOf: result.fileURL), Data(body))
        #expect(
            !result.restarted && result.resumedAtOffset == 50,
            "token etag \(String(describing: token.etag?.debugDescription)); outcomes \(server.outcomes)")
    }
}
