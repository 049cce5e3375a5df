import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// URLs longer than ``HTTPURL/maximumLength`` are refused where they come in, with an error that says so and does not
/// repeat them; a URL of exactly that length downloads, and its token reads back (helper 98's review: a 400 KB
/// fragment made a task record no later run could read).
@Suite("Long URLs")
struct LongURLTests {
    /// `url` with a fragment of slashes (each one escaped as `\/` in JSON, the longest text a URL's byte can become)
    /// that makes it exactly `length` bytes long.
    static func padded(_ url: URL, to length: Int) -> URL {
        let base = url.absoluteString + "#"
        return URL(string: base + String(repeating: "/", count: length - base.utf8.count))!
    }

    @Test("A task for a URL one byte too long is refused with invalidRequest, naming the length, not the URL")
    func taskRefused() throws {
        let url = Self.padded(URL(string: "http://127.0.0.1:1/file.bin")!, to: HTTPURL.maximumLength + 1)
        #expect(url.absoluteString.utf8.count == HTTPURL.maximumLength + 1)
        let error = try #require(throws: ResumableError.self) { try DownloadTask(url: url) }
        #expect(error.code == .invalidRequest)
        #expect(error.message.contains("\(HTTPURL.maximumLength + 1) bytes"), "\(error.message)")
        #expect(error.message.utf8.count < 500, "the message repeats the URL: \(error.message.utf8.count) bytes")
    }

    @Test("A token whose URL is too long is refused as invalid, before anything is touched")
    func tokenRefused() throws {
        var json =
            try JSONSerialization.jsonObject(
                with: JSONEncoder().encode(ResumeToken.sample(tempPath: "/tmp/" + TemporaryFileName.make())))
            as! [String: Any]
        let long = Self.padded(URL(string: "http://127.0.0.1:1/file.bin")!, to: HTTPURL.maximumLength + 1)
        for key in ["url", "originalURL"] {
            var changed = json
            changed[key] = long.absoluteString
            let data = try JSONSerialization.data(withJSONObject: changed)
            let error = try #require(throws: ResumableError.self) {
                try JSONDecoder().decode(ResumeToken.self, from: data)
            }
            #expect(error.code == .invalidToken, "\(key): \(error)")
            #expect(error.message.contains("longer than"), "\(key): \(error.message)")
            #expect(error.message.utf8.count < 500, "\(key): the message repeats the URL")
        }
        json["url"] = Self.padded(URL(string: "http://127.0.0.1:1/file.bin")!, to: HTTPURL.maximumLength).absoluteString
        #expect(throws: Never.self) {
            try JSONDecoder().decode(ResumeToken.self, from: JSONSerialization.data(withJSONObject: json))
        }
    }

    @Test(
        "A redirect to a URL too long is refused as a redirect error, and nothing is written",
        arguments: TransportKind.all)
    func redirectRefused(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let target = Self.padded(fixture.server.url(for: "/real.bin"), to: HTTPURL.maximumLength + 1)
        fixture.serve(.bytes(testBytes(count: 1000)), at: "/real.bin")
        fixture.serve(
            .bytes([], behavior: Behavior(redirect: Redirect(status: 302, location: target.absoluteString))),
            at: "/link")
        let task = try fixture.download("/link", configuration: DownloadFixture.configuration(retries: 0))
        let error = try #require(await failure(of: task))
        #expect(error.code == .redirect, "\(error)")
        #expect(error.message.contains("longer than"), "\(error.message)")
        #expect(error.message.utf8.count < 1000, "the message repeats the URL: \(error.message.utf8.count) bytes")
        #expect(fixture.server.requests(for: "/real.bin").isEmpty)
        #expect(fixture.directory.contents().isEmpty, "\(fixture.directory.contents())")
    }

    @Test(
        "A URL of exactly the longest length is cut, written to a token file, read back and resumed",
        arguments: TransportKind.all)
    func longestURLResumes(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 300_000, seed: 981)
        let served = fixture.serve(.bytes(content))
        let url = Self.padded(served, to: HTTPURL.maximumLength)
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 100_000), for: "/file.bin")
        let task = try DownloadTask(
            url: url, destination: .directory(fixture.directory.url),
            configuration: DownloadFixture.configuration(retries: 0, transport: transport))
        let token = try #require(await failure(of: task)?.resumeToken)
        #expect(token.offset == 100_000)
        #expect(token.url.absoluteString.utf8.count == HTTPURL.maximumLength)
        let result = try await fixture.resumeThroughDisk(token).value
        expectSameBytes(try fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges() == [nil, "bytes=100000-"])
    }
}
