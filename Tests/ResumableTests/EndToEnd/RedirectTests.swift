import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Part C of the protocol rules: redirects and identity.
@Suite("Redirects")
struct RedirectTests {
    @Test(
        "curl 188/189: the range is re-sent after a redirect, and the token names the final URL",
        arguments: TransportKind.all)
    func rangeAfterRedirect(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 10_000)
        fixture.serve(.bytes(content), at: "/real.bin")
        fixture.serve(
            .bytes([], behavior: Behavior(redirect: Redirect(status: 301, location: "/real.bin"))), at: "/link")
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 3000), for: "/real.bin")
        let task = try fixture.download("/link", configuration: DownloadFixture.configuration(retries: 0))
        let token = try #require(await failure(of: task)?.resumeToken)
        #expect(token.url == fixture.server.url(for: "/real.bin"))
        #expect(token.originalURL == fixture.server.url(for: "/link"))
        #expect(token.suggestedFilename == "real.bin")
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges("/real.bin") == ["bytes=3000-"])
        #expect(result.url == fixture.server.url(for: "/real.bin"))
    }

    @Test(
        "A redirect during a resume keeps the range, and a 200 without Content-Range is a restart",
        arguments: TransportKind.all)
    func redirectThenWhole(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 10_000)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 4000)
        fixture.server.enqueue(
            behavior: Behavior(redirect: Redirect(status: 302, location: "/moved.bin")), for: "/file.bin")
        fixture.serve(.bytes(content, behavior: Behavior(ignoreRange: true)), at: "/moved.bin")
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        // The 200 carried the token's strong ETag: asked again with the strong date instead of the entity tag it
        // seemed to ignore; the second 200 is then the whole file, written from byte 0.
        #expect(fixture.ranges("/moved.bin") == ["bytes=4000-", "bytes=4000-"])
        #expect(
            fixture.server.requests(for: "/moved.bin").map { $0.header("If-Range") } == [
                token.etag, token.lastModified,
            ])
        #expect(result.status == 200)
        #expect(result.restarted)
    }

    @Test("Redirect loops and chains longer than the limit fail clearly", arguments: TransportKind.all)
    func loopsAndLimits(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes([], behavior: Behavior(redirect: Redirect(location: "/b"))), at: "/a")
        fixture.serve(.bytes([], behavior: Behavior(redirect: Redirect(location: "/a"))), at: "/b")
        let loop = try #require(await failure(of: fixture.download("/a")))
        #expect(loop.code == .redirect)
        for hop in 0..<12 {
            fixture.serve(
                .bytes([], behavior: Behavior(redirect: Redirect(location: "/hop\(hop + 1)"))), at: "/hop\(hop)")
        }
        fixture.serve(.bytes([1, 2, 3]), at: "/hop12")
        let long = try #require(await failure(of: fixture.download("/hop0")))
        #expect(long.code == .redirect)
        #expect(fixture.server.requests(for: "/hop11").isEmpty, "at most 10 hops are followed")
        #expect(fixture.directory.contents().isEmpty)
    }

    @Test("Redirects to schemes other than http(s) are refused", arguments: TransportKind.all)
    func otherSchemes(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes([], behavior: Behavior(redirect: Redirect(location: "file:///etc/passwd"))))
        let error = try #require(await failure(of: fixture.download()))
        #expect(error.code == .redirect)
    }

    @Test("Credentials are dropped on a cross-origin hop and kept on a same-origin one", arguments: TransportKind.all)
    func credentialsAcrossOrigins(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let other = try LoopbackServer()
        let content = testBytes(count: 1000)
        other.register(.bytes(content), at: "/there.bin")
        fixture.serve(.bytes([], behavior: Behavior(redirect: Redirect(location: "/hop"))), at: "/start")
        fixture.serve(
            .bytes([], behavior: Behavior(redirect: Redirect(location: other.url(for: "/there.bin").absoluteString))),
            at: "/hop"
        )
        let configuration = DownloadFixture.configuration(
            headers: ["Authorization": "Bearer secret", "Cookie": "session=1", "Proxy-Authorization": "Basic x"]
        )
        let result = try await fixture.download("/start", configuration: configuration).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        let sameOrigin = try #require(fixture.server.requests(for: "/hop").first)
        #expect(sameOrigin.header("Authorization") == "Bearer secret")
        let crossOrigin = try #require(other.requests(for: "/there.bin").first)
        #expect(crossOrigin.header("Authorization") == nil)
        #expect(crossOrigin.header("Cookie") == nil)
        #expect(crossOrigin.header("Proxy-Authorization") == nil)
    }

    @Test(
        "An expired resume URL falls back to the original URL; the validators still guard the content",
        arguments: TransportKind.all)
    func expiredURLFallsBack(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 8000)
        fixture.serve(.bytes(content), at: "/signed-1")
        fixture.serve(.bytes([], behavior: Behavior(redirect: Redirect(location: "/signed-1"))), at: "/latest")
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 2000), for: "/signed-1")
        let task = try fixture.download("/latest", configuration: DownloadFixture.configuration(retries: 0))
        let token = try #require(await failure(of: task)?.resumeToken)
        fixture.server.removeResource(at: "/signed-1")
        fixture.serve(.bytes(content), at: "/signed-2")
        fixture.serve(.bytes([], behavior: Behavior(redirect: Redirect(location: "/signed-2"))), at: "/latest")
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges("/signed-2") == ["bytes=2000-"])
    }

    @Test("A replacement URL is used for the resume, guarded by the same validators", arguments: TransportKind.all)
    func replacementURL(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 8000)
        fixture.serve(.bytes(content))
        let token = try await fixture.interruptedToken(after: 3000)
        fixture.serve(.bytes(content), at: "/mirror.bin")
        let result = try await fixture.resumeThroughDisk(token, replacingURL: fixture.server.url(for: "/mirror.bin"))
            .value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges("/mirror.bin") == ["bytes=3000-"])
        #expect(result.fileURL.lastPathComponent == "file.bin", "the name chosen at the start is kept")
    }
}
