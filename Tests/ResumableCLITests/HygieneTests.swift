import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What the tool leaves on disk and prints when tokens and servers are not to be trusted: token file modes,
/// credential headers, terminal escapes.
@Suite("token and output hygiene")
struct HygieneTests {
    /// The permission bits of `path`.
    private static func mode(_ path: String) throws -> Int {
        var status = stat()
        try #require(lstat(path, &status) == 0, "lstat \(path): errno \(errno)")
        return Int(status.st_mode & 0o7777)
    }

    @Test("The token a failed get leaves is mode 0600, and stays so when resume rewrites it")
    func tokenFileModeAfterFailure() async throws {
        let served = try ServedFile(behavior: Behavior(dropAfterBytes: 100_000))
        let scratch = try ScratchDirectory()
        let failed = try await CLIProcess.run(["get", served.url, "--retries", "0", "-q"], in: scratch.url)
        #expect(failed.exitCode == 75, "\(failed)")
        let tokenPath = scratch.file("file.bin.resumable.json").path
        #expect(try Self.mode(tokenPath) == 0o600)

        let again = try await CLIProcess.run(["resume", tokenPath, "--retries", "0", "-q"], in: scratch.url)
        #expect(again.exitCode == 75, "\(again)")
        #expect(try ResumeToken(contentsOf: URL(fileURLWithPath: tokenPath)).offset == 200_000)
        #expect(try Self.mode(tokenPath) == 0o600)
        #expect(!scratch.contents().contains { $0.hasSuffix(".writing") })
    }

    @Test("The token a SIGINT leaves is mode 0600")
    func tokenFileModeAfterSignal() async throws {
        let gate = BodyGate(holdingAfter: 100_000)
        let served = try ServedFile(behavior: Behavior(gate: gate))
        let scratch = try ScratchDirectory()
        let running = try CLIProcess(["get", served.url, "-q"], in: scratch.url)
        #expect(await gate.waitUntilHeld())
        // The server sent 100 000 bytes and holds the rest: wait until they are on disk, so the pause has a token.
        #expect(try await eventually { scratch.largestPartialFileSize() == 100_000 })
        running.send(SIGINT)
        let interrupted = try await running.finish()
        gate.open()
        #expect(interrupted.exitCode == 130, "\(interrupted)")
        #expect(try Self.mode(scratch.file("file.bin.resumable.json").path) == 0o600)
    }

    @Test("X-Api-Key and --sensitive-header names reach the server but never the token file")
    func sensitiveHeadersAreNotStored() async throws {
        let served = try ServedFile(behavior: Behavior(dropAfterBytes: 100_000))
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(
            [
                "get", served.url, "--retries", "0", "-q", "-H", "X-Api-Key: k-secret", "-H", "X-Tenant: acme-secret",
                "--sensitive-header", "x-TENANT", "-H", "X-Trace: t1",
            ], in: scratch.url)
        #expect(result.exitCode == 75, "\(result)")
        let request = try #require(served.server.requests(for: served.path).first)
        #expect(request.header("X-Api-Key") == "k-secret")
        #expect(request.header("X-Tenant") == "acme-secret")

        let tokenURL = scratch.file("file.bin.resumable.json")
        let text = String(decoding: try Data(contentsOf: tokenURL), as: UTF8.self)
        #expect(!text.contains("k-secret") && !text.contains("X-Api-Key"), "\(text)")
        #expect(!text.contains("acme-secret") && !text.contains("X-Tenant"), "\(text)")
        #expect(try ResumeToken(contentsOf: tokenURL).headers == ["X-Trace": "t1"])
    }

    @Test("--sensitive-header takes a header name only")
    func sensitiveHeaderUsage() async throws {
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(
            ["get", "http://127.0.0.1:1/x", "--sensitive-header", "X Bad"], in: scratch.url)
        #expect(result.exitCode == 64, "\(result)")
        #expect(result.stderr.contains("--sensitive-header"))
        #expect(scratch.contents().isEmpty)
    }

    /// A valid token whose strings carry terminal control sequences wherever the decoder lets them through, in a
    /// token file and a temporary directory whose names carry ESC too.
    private static func hostileToken(in scratch: ScratchDirectory) throws -> URL {
        let directory = scratch.url.path + "/dir\u{1B}]0;owned\u{07}"
        let object: [String: Any] = [
            "version": 1,
            "url": "http://127.0.0.1:1/a.bin",
            "originalURL": "http://127.0.0.1:1/latest",
            "offset": 10,
            "expectedLength": 100,
            "etag": "\"\u{9B}2J\u{202E}gpj.exe\"",
            "lastModified": "Mon\u{9B}31m, 02 Nov 2026 10:00:00 GMT",
            "responseDate": NSNull(),
            "acceptRanges": NSNull(),
            "tempPath": directory + "/.resumable-3f2504e0-4f89-41d3-9a0c-0305e82c3301.partial",
            "suggestedFilename": "a.bin",
            "destination": NSNull(),
            "headers": ["X-Trace": "1"],
            "createdAt": "2026-11-30T03:40:00.000Z",
            "updatedAt": "2026-11-30T03:44:40.250Z",
        ]
        let tokenURL = scratch.file("tok\u{1B}[2J.json")
        try JSONSerialization.data(withJSONObject: object).write(to: tokenURL)
        // The decoder must accept it, or the test would only show that it refuses it.
        _ = try ResumeToken(contentsOf: tokenURL)
        return tokenURL
    }

    /// Whether `text` holds a C0 control other than line feed, DEL, a C1 control or a bidirectional override.
    private static func hasRawControl(_ text: String) -> Bool {
        text.unicodeScalars.contains {
            ($0.value < 0x20 && $0 != "\n") || (0x7F...0x9F).contains($0.value) || $0.value == 0x202E
        }
    }

    @Test("inspect escapes control characters from the token in its text report")
    func inspectEscapesText() async throws {
        let scratch = try ScratchDirectory()
        let tokenURL = try Self.hostileToken(in: scratch)
        let result = try await CLIProcess.run(["inspect", tokenURL.path], in: scratch.url)
        // Its temporary file does not exist, so a resume would need -o: 65, with the whole report printed.
        #expect(result.exitCode == 65, "\(result)")
        #expect(!Self.hasRawControl(result.stdout), "\(result.stdout.debugDescription)")
        #expect(!Self.hasRawControl(result.stderr))
        #expect(result.stdout.contains("tok\\u{1B}[2J.json"))
        #expect(result.stdout.contains("ETag:           \"\\u{9B}2J\\u{202E}gpj.exe\""))
        #expect(result.stdout.contains("Mon\\u{9B}31m, 02 Nov 2026"))
        #expect(result.stdout.contains("dir\\u{1B}]0;owned\\u{7}/.resumable-"))
    }

    @Test("inspect --json escapes them too, and the JSON still holds the exact strings")
    func inspectEscapesJSON() async throws {
        let scratch = try ScratchDirectory()
        let tokenURL = try Self.hostileToken(in: scratch)
        let result = try await CLIProcess.run(["inspect", "--json", tokenURL.path], in: scratch.url)
        #expect(result.exitCode == 65, "\(result)")
        #expect(!Self.hasRawControl(result.stdout), "\(result.stdout.debugDescription)")
        let object = try jsonObject(result.stdout)
        #expect(object["tokenFile"] as? String == tokenURL.path)
        let token = try #require(object["token"] as? [String: Any])
        #expect(token["etag"] as? String == "\"\u{9B}2J\u{202E}gpj.exe\"")
        #expect(token["lastModified"] as? String == "Mon\u{9B}31m, 02 Nov 2026 10:00:00 GMT")
    }

    @Test("Error messages that quote a hostile path are escaped on standard error")
    func errorsAreEscaped() async throws {
        let scratch = try ScratchDirectory()
        let path = scratch.file("missing\u{1B}[2J\r.json").path
        for arguments in [["inspect", path], ["resume", path]] {
            let result = try await CLIProcess.run(arguments, in: scratch.url)
            #expect(result.exitCode == 65, "\(result)")
            #expect(!Self.hasRawControl(result.stderr), "\(result.stderr.debugDescription)")
            #expect(result.stderr.contains("missing\\u{1B}[2J\\u{D}.json"))
        }
    }
}
