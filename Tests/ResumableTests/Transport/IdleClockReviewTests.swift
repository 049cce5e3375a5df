import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Review by helper 102 of 578680d (the URLSession idle watchdog's clock starts with a request's first body bytes,
/// the head marks only the session).
///
/// Tests named **FAILS on 9aae015** prove a break.
@Suite("Review of 578680d: when the URLSession idle clock starts")
struct IdleClockReviewTests {
    /// **FAILS on 9aae015 with URLSession.** A hang (the idle timeout ends "a stall without data", docs/cli.md
    /// `--timeout`), the one d84785a proved and a5b4f80 fixed, back for a body without bytes. The server sends a
    /// chunked `200` whose first chunk is the last one (`0`, an empty body), then a trailer field every 100 ms and
    /// never the blank line that ends the response. 578680d leaves everything before the first body bytes to
    /// FoundationNetworking's own timer, on the ground that "only header lines re-arm it, and none come after the
    /// head"; but trailer fields are header lines that come after the head, so that timer never fires, and the
    /// watchdog's clock never starts, since no body byte ever comes. The download outlives the server's 10 s of
    /// trailer fields with an idle timeout of 1 s (libcurl ends it within seconds).
    ///
    /// Likely cause: `Sources/Resumable/Transport/URLSessionTransport.swift:500-501` (the head delivered with
    /// `startingClock: false`) and `Sources/Resumable/Transport/IdleWatchdog.swift:47` (`idle(at:)` is nil until the
    /// first body bytes). Fix: start the request's clock when the head is delivered but only for the idle check after
    /// the head (not the session rule), e.g. mark the head's end as the request's last activity while the session's
    /// deliveries still keep it from being idle; or start the clock at the head whenever the response has no
    /// `Content-Length` (a chunked body may have no data at all).
    @Test(
        "FAILS on 9aae015 with URLSession: an empty chunked body followed by trailers trickled forever ends in the idle timeout",
        arguments: TransportKind.all)
    func emptyBodyTrailersTrickledForever(transport: TransportKind) async throws {
        let server = try RawScriptServer { _, _, send in
            let head = RawScriptServer.head(
                "200 OK", ["Transfer-Encoding: chunked", "Trailer: X-Wait"], etag: Array("\"e\"".utf8))
            guard send(head + Array("0\r\n".utf8)) else { return .clientLeft(0) }
            // The server's own pace, bounded so the test ends: at most 10 s of trailer fields, then the connection
            // closes without the blank line.
            let until = ContinuousClock.now.advanced(by: .seconds(10))
            var lines = 0
            while ContinuousClock.now < until {
                guard send(Array("X-Wait: \(lines)\r\n".utf8)) else { return .clientLeft(lines) }
                lines += 1
                Thread.sleep(forTimeInterval: 0.1)
            }
            return .completed(lines)
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        var configuration = DownloadFixture.configuration(retries: 0, transport: transport)
        configuration.idleTimeout = .seconds(1)
        let task = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/empty.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        let result = await task.result
        let outcomes = server.outcomes
        #expect(
            outcomes.allSatisfy { if case .clientLeft = $0 { true } else { false } },
            "the download outlived the server's 10 s of trailer fields (idle timeout 1 s): \(outcomes); \(result)")
    }
}
