import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Review by helper 101 of a5b4f80's `IdleWatchdog` (the URLSession transport's idle timeout on head and body bytes).
///
/// Tests named **FAILS on a5b4f80** prove a break.
@Suite("Review of a5b4f80: the URLSession idle watchdog")
struct IdleWatchdogReviewTests {
    /// **FAILS on a5b4f80 with URLSession.** Rule 2 (nothing downloaded is lost without need) and docs/cli.md
    /// `--timeout` ("a stall without data"): data never stops flowing, yet connections time out. Four connections
    /// fetch 128 KiB (32 KiB each) under a rate limit of 16 KiB/s with an idle timeout of 1.5 s. The server holds each
    /// answer after its head until all four heads are out, then sends every byte at once: all that holds the download
    /// back from there is the limit, which the engine applies by blocking in the consumer call
    /// (`DownloadEngine.passRateLimiters`). The four requests of one download share one `URLSession`, whose delegate
    /// queue is serial: while one connection's piece waits for the limit (1 s for 16 KiB), the other connections'
    /// pieces, already received, wait behind it on the queue. `TransferActivity` counts only the connection whose
    /// consumer runs as busy, so a connection whose first piece is fourth in line looks idle for 2 s, and its
    /// `IdleWatchdog` cancels it with `timedOut` ("the server sent no data for 1.5 seconds") although its bytes sat in
    /// memory the whole time. The schedule asks for the range again, so the download still finishes here, one request
    /// and one connection's bytes later (each timed-out range is asked for again and its bytes sent twice); with a
    /// lower limit or more connections, more of them time out. With libcurl (a thread per connection, each busy in its own wait) nothing
    /// times out.
    ///
    /// Only URLSession: the libcurl transport has a thread per connection, each busy in its own wait. (Run with both,
    /// a parallel run failed both: the gates hold each answer after its head until all four heads are out, which a
    /// loaded machine stretched past the idle timeout, a real stall for libcurl. The URLSession watchdog's clock now
    /// starts with the first body bytes, so that phase is FoundationNetworking's timer's, as a server that sends a
    /// head and then nothing is.)
    ///
    /// Likely cause: `Sources/Resumable/Transport/URLSessionTransport.swift:568-570` marks a request busy only inside
    /// its own delivery, and `Sources/Resumable/Transport/IdleWatchdog.swift:62-75` takes any other time as silence,
    /// though on Linux the session's serial `URLSessionDeliveryQueue` may hold that request's pieces, received long
    /// ago, behind another request's wait. Fix: count a request as active when FoundationNetworking hands a callback
    /// for it to the delivery queue, not only when the consumer runs: e.g. mark its `TransferActivity` busy from the
    /// enqueue of a data callback until that callback ends (a count of pending deliveries, idle only at zero).
    @Test(
        "FAILS on a5b4f80 with URLSession: rate-limited connections of one download never time out while data flows",
        arguments: [TransportKind.urlSession])
    func rateLimitedConnectionsShareTheDelegateQueue(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let seed: UInt64 = 10_103
        let total: Int64 = 128 << 10
        let path = Segmented.path
        fixture.serve(.generated(length: total, seed: seed))
        // Every answer held right after its head, until all four heads are out.
        let gates = (0..<4).map { _ in BodyGate(holdingAfter: 0) }
        defer { for gate in gates { gate.open() } }
        fixture.server.enqueue(behavior: Behavior(gate: gates[0]), for: path)
        for index in 1..<4 {
            fixture.server.enqueue(
                behavior: Behavior(gate: gates[index]), for: path,
                whenRangeStartsAt: Segmented.start(index, of: 4, total: total))
        }
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(4), stallTimeout: .seconds(600), retries: 0, events: events)
        configuration.minimumSegmentLength = 16 << 10
        // 24 KiB of the limit's worth per idle timeout, as in the first version of this test (1.5 s, 16 KiB/s), with
        // twice the margin for a busy machine between two deliveries.
        configuration.idleTimeout = .seconds(3)
        configuration.rateLimiters = [RateLimiter(bytesPerSecond: 8 << 10)]
        let download = try fixture.download(configuration: configuration)
        defer { download.cancel() }
        for gate in gates {
            #expect(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
        }
        for gate in gates { gate.open() }
        let result = await download.result
        let timedOut = events.segmentsFailed.filter { $0.error.code == .timedOut }
        #expect(
            timedOut.isEmpty,
            "connections timed out while the limit held their data: \(timedOut.map { "\($0.connection): \($0.error)" })"
        )
        switch result {
        case .success(let success):
            let exact = try fixture.contents(of: success.fileURL) == testBytes(count: Int(total), seed: seed)
            #expect(exact)
        case .failure(let error):
            Issue.record("failed: \(error); segments started: \(events.segmentsStarted.count)")
        }
    }
}
