import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Adversarial review of the session's fixes: the ASCII-only strong entity tag (ddd1887) and the bound on answers
/// that bring the file no further (8d926c5).
@Suite("Session fixes under attack")
struct SessionFixesAttackTests {
    // MARK: - Finding 1: entity tags are compared as Unicode strings, not byte for byte

    /// Rule broken: "a finished file is exactly the server's bytes (no splice)".
    ///
    /// Version A has `ETag: "K"` (ASCII, so a strong validator under ddd1887). Version B has `ETag: "\u{212A}"` (KELVIN
    /// SIGN, valid UTF-8): another entity tag, byte for byte (RFC 9110 §8.8.3.2 compares opaque tags character by
    /// character, as octets). The server here is correct: it answers 206 only when `If-Range` is its ETag byte for
    /// byte (or when there is no `If-Range`), else 200.
    ///
    /// The resume sends `If-Range: "K"`; the server, now holding B, answers 200 with B's tag. The client compares the
    /// tags with Swift's `String ==`, which is Unicode canonical equivalence: U+212A decomposes canonically to `K`, so
    /// `head.value("ETag") == tag` holds (`ResumeStateMachine.receiveWhole`, the `ignoresEntityTagIfRange` branch) and
    /// the client concludes the server ignores entity-tag If-Ranges. Without a Last-Modified it then asks
    /// `Range: bytes=50-` with no `If-Range` and requires the tag on the 206 (`carriesRequiredTag`, again `==`), and
    /// `Validators.agree(with:)` (again `==`) passes: the first 50 bytes of A are joined to the last 50 of B.
    @Test(
        "An entity tag canonically equivalent to the stored one (but other bytes) never joins two versions",
        arguments: TransportKind.all)
    func canonicallyEquivalentETagSplices(transport: TransportKind) async throws {
        let old = testBytes(count: 100, seed: 1)
        let new = testBytes(count: 100, seed: 2)
        let oldTag = Array("\"K\"".utf8)
        let newTag: [UInt8] = [0x22, 0xE2, 0x84, 0xAA, 0x22]  // "\u{212A}": KELVIN SIGN
        let server = try RawScriptServer { request, index in
            if index == 0 {
                return RawScriptServer.head("200 OK", ["Content-Length: 100"], etag: oldTag)
                    + Array(old[0..<50])
            }
            // A correct server holding the new version (RFC 9110 §13.1.5: If-Range compared byte for byte).
            let whole =
                RawScriptServer.head("200 OK", ["Content-Length: 100"], etag: newTag) + new
            guard let range = RawScriptServer.header("Range", in: request),
                let text = String(bytes: range, encoding: .utf8), text.hasPrefix("bytes="), text.hasSuffix("-"),
                let start = Int(text.dropFirst(6).dropLast()), start < 100
            else { return whole }
            if let ifRange = RawScriptServer.header("If-Range", in: request), ifRange != newTag { return whole }
            return RawScriptServer.head(
                "206 Partial Content",
                ["Content-Range: bytes \(start)-99/100", "Content-Length: \(100 - start)"],
                etag: newTag) + Array(new[start...])
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        var configuration = DownloadFixture.configuration(retries: 0, transport: transport)
        let first = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        let error = try #require(await failure(of: first))
        let token = try #require(error.resumeToken, "\(error)")
        #expect(token.offset == 50)
        #expect(token.etag == "\"K\"")
        configuration.retry.maximumRetries = 2
        let outcome = await (try DownloadTask.resume(from: token, configuration: configuration)).result
        switch outcome {
        case .success(let result):
            let bytes = [UInt8](try Data(contentsOf: result.fileURL))
            let requests = server.requests.dropFirst().map { String(decoding: $0, as: UTF8.self) }
            let splice = bytes == Array(old[0..<50]) + Array(new[50...])
            let isNew = bytes == new
            #expect(isNew, "splice of old[0..<50] + new[50...]: \(splice); requests: \(requests)")
        case .failure(let error):
            #expect(error.code != .cancelled, "\(error)")
        }
    }

    // MARK: - Finding 2: redirects count as answers that bring the file no further

    /// Rule broken: a legitimate server must not be refused (the bound of 8d926c5 is for answers that bring nothing).
    ///
    /// `DownloadEngine.loop` counts every `.requestAgain` that leaves the file where it was (`fruitlessInARow`) and
    /// ends the download after `ResumeStateMachine.maximumRestarts` (10). A followed redirect is a `.requestAgain`
    /// too (`ResumeStateMachine.receive`, `.skipBody(.requestAgain)`), so a chain of 11 redirects, allowed by
    /// `maximumRedirects = 20`, now ends with `protocolViolation` "the server answered 11 requests in a row without
    /// bringing the file further" before the file is ever asked for.
    @Test("A redirect chain the configuration allows is followed (maximumRedirects 20, 11 hops)")
    func redirectsCountAsFruitless() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: 1000)
        fixture.serve(.bytes(content), at: "/real.bin")
        let hops = 11
        for hop in 0..<hops {
            let next = hop + 1 == hops ? "/real.bin" : "/hop\(hop + 1)"
            fixture.serve(.bytes([], behavior: Behavior(redirect: Redirect(location: next))), at: "/hop\(hop)")
        }
        var configuration = DownloadFixture.configuration(retries: 0)
        configuration.maximumRedirects = 20
        let outcome = await (try fixture.download("/hop0", configuration: configuration)).result
        switch outcome {
        case .success(let result):
            try expectSameBytes(fixture.contents(of: result.fileURL), content)
        case .failure(let error):
            Issue.record("a chain of \(hops) redirects with maximumRedirects 20 failed: \(error)")
        }
    }

    /// The same bound with the default configuration (`maximumRedirects` 10): a resume whose URL expired (403) goes
    /// back to the original URL (`triedOriginalURL`, one `.requestAgain`), which redirects 10 times, as the first
    /// download did: 11 answers "without progress", and the resume fails with `protocolViolation` before the file is
    /// asked for again (with the maximum of redirects the default configuration allows).
    @Test(
        "A resume whose URL expired goes back through the original URL's 10 redirects",
        arguments: TransportKind.all)
    func expiredURLThenTenRedirects(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 10_000)
        fixture.serve(.bytes(content), at: "/real.bin")
        let hops = 10
        for hop in 0..<hops {
            let next = hop + 1 == hops ? "/real.bin" : "/hop\(hop + 1)"
            fixture.serve(.bytes([], behavior: Behavior(redirect: Redirect(location: next))), at: "/hop\(hop)")
        }
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 4000), for: "/real.bin")
        let first = try fixture.download("/hop0", configuration: DownloadFixture.configuration(retries: 0))
        let token = try #require(await failure(of: first)?.resumeToken)
        #expect(token.offset == 4000)
        #expect(token.url == fixture.server.url(for: "/real.bin"))
        #expect(token.originalURL == fixture.server.url(for: "/hop0"))
        // The resumed URL has expired: 403 once, then the original URL leads there again.
        fixture.server.enqueue(behavior: Behavior(status: 403), for: "/real.bin")
        let outcome = await (try fixture.resumeThroughDisk(token)).result
        switch outcome {
        case .success(let result):
            try expectSameBytes(fixture.contents(of: result.fileURL), content)
        case .failure(let error):
            Issue.record("the resume failed: \(error)")
        }
    }
}
