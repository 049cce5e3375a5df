import Foundation
import LoopbackServer
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// ``ConcurrencyLimit`` (nginx `limit_conn`) and the concurrency counters. Responses are held at a ``BodyGate``
/// so that exactly the requests the test chose are in flight.
@Suite("Concurrency limit")
struct ConcurrencyLimitTests {
    let content = Resource.generatedBytes(seed: 13, range: 0..<50_000)

    @Test("Beyond the limit a request gets 503 with Retry-After, takes no one-shot, and is counted")
    func overloadAnswer() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = BodyGate(holdingAfter: 0)
        server.register(
            .bytes(
                content, behavior: Behavior(gate: gate),
                concurrencyLimit: ConcurrencyLimit(maximum: 2, retryAfter: "3")),
            at: "/f")
        let held = (0..<2).map { _ in ParallelClients.start(port: server.port, path: "/f") }
        #expect(await gate.waitUntilHeld(count: 2))
        #expect(server.concurrentRequests(for: "/f") == 2)

        server.enqueue(behavior: Behavior(status: 500), for: "/f")
        server.enqueue(behavior: Behavior(status: 500), for: "/f", whenRangeStartsAt: 0)
        let rejected = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=0-9")])
        #expect(rejected.status == 503)
        #expect(rejected.header("Retry-After") == "3")
        #expect(rejected.header("Content-Type") == "text/html")
        #expect(rejected.header("Content-Range") == nil)
        #expect(rejected.header("Connection") == "close")
        #expect(server.queuedCount(for: "/f") == 2, "a request turned away takes no one-shot")
        #expect(server.overloadAnswers(for: "/f") == 1)
        #expect(server.peakConcurrentRequests(for: "/f") == 2)
        #expect(server.concurrentRequests(for: "/f") == 2)
        #expect(server.requests(for: "/f").map(\.wasOverloaded) == [false, false, true])
        server.clearQueue(for: "/f")

        gate.open()
        for task in held {
            let response = try await task.value.response
            #expect(response.status == 200)
            expectSameBytes(response.body, content)
        }
        // The count drops before the server closes a connection, so a client that saw the end sees it.
        #expect(server.concurrentRequests(for: "/f") == 0)
        #expect(try RawHTTPClient.request(port: server.port, path: "/f").body == content)
        #expect(server.overloadAnswers(for: "/f") == 1)
        #expect(server.peakConcurrentRequests(for: "/f") == 2)

        server.resetConcurrencyCounters(for: "/f")
        #expect(server.overloadAnswers(for: "/f") == 0)
        #expect(server.peakConcurrentRequests(for: "/f") == 0)
    }

    @Test("Sixteen parallel requests against a limit of four: exactly four are served, twelve turned away")
    func exactUnderParallelLoad() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = BodyGate(holdingAfter: 0)
        server.register(
            .bytes(
                content, behavior: Behavior(gate: gate),
                concurrencyLimit: ConcurrencyLimit(maximum: 4, retryAfter: "0")),
            at: "/f")
        let tasks = (0..<16).map { index in
            ParallelClients.start(port: server.port, path: "/f", headers: [("Range", "bytes=\(index * 100)-")])
        }
        // Each request is admitted or turned away as it is recorded: once all sixteen are, the outcome is fixed.
        #expect(await server.waitForRequests(count: 16, path: "/f", timeout: .seconds(120)))
        #expect(await gate.waitUntilHeld(count: 4))
        #expect(server.overloadAnswers(for: "/f") == 12)
        #expect(server.concurrentRequests(for: "/f") == 4)
        gate.open()

        var served = 0
        for (index, task) in tasks.enumerated() {
            let response = try await task.value.response
            switch response.status {
            case 206:
                served += 1
                expectSameBytes(response.body, Array(content[(index * 100)...]))
            case 503:
                #expect(response.header("Retry-After") == "0")
            default:
                Issue.record("unexpected status \(response.status)")
            }
        }
        #expect(served == 4)
        #expect(server.peakConcurrentRequests(for: "/f") == 4)
        #expect(server.overloadAnswers(for: "/f") == 12)
        #expect(server.requests(for: "/f").filter(\.wasOverloaded).count == 12)
        #expect(gate.arrivals == 4)
    }

    @Test("A server-wide limit applies to each path on its own, with 429 if asked; a resource's own limit wins")
    func serverWideLimit() async throws {
        let limit = ConcurrencyLimit(maximum: 1, status: 429, retryAfter: "1")
        let server = try LoopbackServer(configuration: .init(concurrencyLimit: limit))
        defer { server.shutdown() }
        let gateA = BodyGate(holdingAfter: 0)
        let gateB = BodyGate(holdingAfter: 0)
        let gateC = BodyGate(holdingAfter: 0)
        server.register(.bytes(content, behavior: Behavior(gate: gateA)), at: "/a")
        server.register(.bytes(content, behavior: Behavior(gate: gateB)), at: "/b")
        server.register(
            .bytes(content, behavior: Behavior(gate: gateC), concurrencyLimit: ConcurrencyLimit(maximum: 2)), at: "/c")

        var tasks = [ParallelClients.start(port: server.port, path: "/a")]
        #expect(await gateA.waitUntilHeld())
        let second = try RawHTTPClient.request(port: server.port, path: "/a")
        #expect(second.status == 429)
        #expect(second.header("Retry-After") == "1")

        tasks.append(ParallelClients.start(port: server.port, path: "/b"))
        #expect(await gateB.waitUntilHeld(), "another path is counted on its own")

        tasks += (0..<2).map { _ in ParallelClients.start(port: server.port, path: "/c") }
        #expect(await gateC.waitUntilHeld(count: 2))
        let third = try RawHTTPClient.request(port: server.port, path: "/c")
        #expect(third.status == 503)
        #expect(third.header("Retry-After") == nil)

        // Unknown paths are limited too (each on its own), though the 404 goes quickly.
        #expect(try RawHTTPClient.request(port: server.port, path: "/missing").status == 404)

        #expect(server.overloadAnswers(for: "/a") == 1)
        #expect(server.overloadAnswers(for: "/b") == 0)
        #expect(server.overloadAnswers(for: "/c") == 1)
        #expect(server.peakConcurrentRequests(for: "/missing") == 1)
        for gate in [gateA, gateB, gateC] { gate.open() }
        for task in tasks {
            #expect(try await task.value.response.body == content)
        }
    }

    @Test("With keep-alive a request leaves the count before the next one on its connection is read")
    func keepAliveLeavesBeforeNext() throws {
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        defer { server.shutdown() }
        server.register(.bytes(content, concurrencyLimit: ConcurrencyLimit(maximum: 1)), at: "/f")
        let descriptor = try RawHTTPClient.connect(port: server.port)
        defer { close(descriptor) }
        let three = String(repeating: RawHTTPClient.requestText(path: "/f"), count: 3)
        try RawHTTPClient.send(descriptor, Array(three.utf8))
        var pending: [UInt8] = []
        for _ in 0..<3 {
            let (head, body) = try InterimAndKeepAliveTests.readResponse(descriptor, buffer: &pending)
            #expect(head.hasPrefix("HTTP/1.1 200 OK\r\n"))
            expectSameBytes(body, content)
        }
        #expect(server.overloadAnswers(for: "/f") == 0)
        #expect(server.peakConcurrentRequests(for: "/f") == 1)
        #expect(server.requests(for: "/f").map(\.connection) == [1, 1, 1])
    }

    @Test("Peak concurrency shows requests that really overlapped, and waits see them come and go")
    func peakAndWaits() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes(content), at: "/f")
        for _ in 0..<3 {
            #expect(try RawHTTPClient.request(port: server.port, path: "/f").body == content)
        }
        #expect(server.peakConcurrentRequests(for: "/f") == 1, "one after the other")
        let gate = BodyGate(holdingAfter: 0)
        server.register(.bytes(content, behavior: Behavior(gate: gate)), at: "/f")
        let tasks = (0..<5).map { _ in ParallelClients.start(port: server.port, path: "/f") }
        #expect(await server.waitForConcurrentRequests(count: 5, path: "/f", timeout: .seconds(120)))
        #expect(server.peakConcurrentRequests(for: "/f") == 5)
        gate.open()
        #expect(await server.waitUntilIdle(path: "/f", timeout: .seconds(120)))
        for task in tasks {
            #expect(try await task.value.response.body == content)
        }
        #expect(server.peakConcurrentRequests(for: "/f") == 5)
        #expect(server.overloadAnswers(for: "/f") == 0)
    }
}
