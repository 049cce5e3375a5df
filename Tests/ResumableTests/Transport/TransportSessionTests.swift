import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// A ``TransportSession`` lives for one download task: resolved once, and its connections kept between requests.
@Suite("Transport sessions")
struct TransportSessionTests {
    static func request(_ url: URL, range: String? = nil) -> TransportRequest {
        var headers = [HTTPHeader(name: "Accept-Encoding", value: "identity")]
        if let range { headers.append(HTTPHeader(name: "Range", value: range)) }
        // A long idle timeout: a request held at a gate must never time out while the busy pool keeps the test
        // from opening the gate.
        return TransportRequest(url: url, headers: headers, idleTimeout: .seconds(600))
    }

    /// A server that keeps connections open, serving `content` at `/file.bin`.
    static func keepAliveServer(_ content: [UInt8]) throws -> LoopbackServer {
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        server.register(.bytes(content), at: "/file.bin")
        return server
    }

    @Test("Two requests through one libcurl session go out on one connection; a whole then a range")
    func curlSessionReusesConnection() async throws {
        let content = testBytes(count: 100_000, seed: 21)
        let server = try Self.keepAliveServer(content)
        let session = try DownloadTask.Transport.libcurl.makeSession()
        defer { session.close() }
        let whole = RecordingConsumer(keepsBytes: true)
        try await session.execute(Self.request(server.url(for: "/file.bin")), consumer: whole)
        let rest = RecordingConsumer(keepsBytes: true)
        try await session.execute(Self.request(server.url(for: "/file.bin"), range: "bytes=60000-"), consumer: rest)
        expectSameBytes(whole.state.withLock { $0.received }, content)
        #expect(rest.state.withLock { $0.head?.status } == 206)
        expectSameBytes(rest.state.withLock { $0.received }, Array(content[60_000...]))
        let connections = server.requests.map(\.connection)
        #expect(connections.count == 2)
        #expect(Set(connections).count == 1, "one kept-alive connection: \(connections)")
    }

    @Test("Without a session, each libcurl request opens a connection of its own")
    func curlWithoutSessionOpensNewConnections() async throws {
        let content = testBytes(count: 10_000, seed: 22)
        let server = try Self.keepAliveServer(content)
        for _ in 0..<2 {
            try await DownloadTask.Transport.libcurl.execute(
                Self.request(server.url(for: "/file.bin")), consumer: RecordingConsumer())
        }
        #expect(server.requests.map(\.connection) == [1, 2])
    }

    @Test("A libcurl request whose head was declined leaves no connection behind; the next opens a fresh one")
    func curlDeclinedRequestClosesItsConnection() async throws {
        let content = testBytes(count: 2_000_000, seed: 23)
        let server = try Self.keepAliveServer(content)
        let session = try DownloadTask.Transport.libcurl.makeSession()
        defer { session.close() }
        let declining = RecordingConsumer(acceptsHead: false)
        try await session.execute(Self.request(server.url(for: "/file.bin")), consumer: declining)
        #expect(declining.state.withLock { $0.bytes } == 0)
        let second = RecordingConsumer(keepsBytes: true)
        try await session.execute(Self.request(server.url(for: "/file.bin")), consumer: second)
        expectSameBytes(second.state.withLock { $0.received }, content)
        #expect(server.requests.map(\.connection) == [1, 2], "a half-read body is never reused")
    }

    @Test("Overlapping requests through one libcurl session each complete, on connections of their own")
    func curlOverlappingRequests() async throws {
        let content = testBytes(count: 300_000, seed: 24)
        let server = try Self.keepAliveServer(content)
        let gate = BodyGate(holdingAfter: 1000)
        server.register(.bytes(content, behavior: Behavior(gate: gate)), at: "/held.bin")
        let session = try DownloadTask.Transport.libcurl.makeSession()
        defer { session.close() }
        let held = RecordingConsumer(keepsBytes: true)
        async let first: Void = session.execute(Self.request(server.url(for: "/held.bin")), consumer: held)
        #expect(await gate.waitUntilHeld())
        let other = RecordingConsumer(keepsBytes: true)
        try await session.execute(Self.request(server.url(for: "/file.bin")), consumer: other)
        gate.open()
        try await first
        expectSameBytes(held.state.withLock { $0.received }, content)
        expectSameBytes(other.state.withLock { $0.received }, content)
        #expect(Set(server.requests.map(\.connection)).count == 2)
    }

    @Test("Requests through one URLSession session share its connection pool", arguments: [2, 3])
    func urlSessionReusesConnection(requests: Int) async throws {
        let content = testBytes(count: 50_000, seed: 25)
        let server = try Self.keepAliveServer(content)
        let session = try DownloadTask.Transport.urlSession.makeSession()
        defer { session.close() }
        for index in 0..<requests {
            let consumer = RecordingConsumer(keepsBytes: true)
            let offset = index * 10_000
            try await session.execute(
                Self.request(server.url(for: "/file.bin"), range: offset == 0 ? nil : "bytes=\(offset)-"),
                consumer: consumer)
            expectSameBytes(consumer.state.withLock { $0.received }, Array(content[offset...]))
        }
        let connections = server.requests.map(\.connection)
        #expect(connections.count == requests)
        #expect(Set(connections).count == 1, "one kept-alive connection: \(connections)")
    }

    @Test(
        "A closed session refuses further requests with a cancellation, for every transport",
        arguments: [TransportKind.libcurl, .urlSession, .automatic])
    func closedSessionRefuses(transport: TransportKind) async throws {
        let server = try Self.keepAliveServer(testBytes(count: 1000))
        let session = try transport.makeSession()
        try await session.execute(Self.request(server.url(for: "/file.bin")), consumer: RecordingConsumer())
        session.close()
        session.close()
        let consumer = RecordingConsumer()
        let error = await #expect(throws: ResumableError.self) {
            try await session.execute(Self.request(server.url(for: "/file.bin")), consumer: consumer)
        }
        #expect(error?.code == .cancelled)
        #expect(consumer.state.withLock { $0.heads } == 0)
        #expect(server.requests.count == 1)
    }

    @Test("Closing a session cancels its request in flight", arguments: TransportKind.all)
    func closeCancelsRunningRequest(transport: TransportKind) async throws {
        let server = try LoopbackServer()
        let gate = BodyGate(holdingAfter: 1000)
        server.register(.bytes(testBytes(count: 100_000), behavior: Behavior(gate: gate)), at: "/held.bin")
        let session = try transport.makeSession()
        let consumer = RecordingConsumer()
        let running = Task { () async -> ResumableError? in
            do throws(ResumableError) {
                try await session.execute(Self.request(server.url(for: "/held.bin")), consumer: consumer)
                return nil
            } catch {
                return error
            }
        }
        #expect(await gate.waitUntilHeld())
        session.close()
        let error = await running.value
        #expect(error?.code == .cancelled)
        #expect(consumer.state.withLock { $0.bytes } <= 1000)
    }

    @Test("A custom transport's session passes requests through until closed")
    func customSession() async throws {
        let server = try LoopbackServer()
        server.register(.bytes(testBytes(count: 1000)), at: "/file.bin")
        let session = try DownloadTask.Transport.custom(DownloadTask.Transport.libcurl).makeSession()
        let consumer = RecordingConsumer()
        try await session.execute(Self.request(server.url(for: "/file.bin")), consumer: consumer)
        #expect(consumer.state.withLock { $0.bytes } == 1000)
        session.close()
        await #expect(throws: ResumableError.self) {
            try await session.execute(Self.request(server.url(for: "/file.bin")), consumer: RecordingConsumer())
        }
    }

    @Test("A head the consumer declines stops the body: nothing reaches the consumer", arguments: TransportKind.all)
    func declinedHeadStopsBody(transport: TransportKind) async throws {
        let server = try LoopbackServer()
        server.register(.generated(length: 50_000_000, seed: 26), at: "/big")
        let consumer = RecordingConsumer(acceptsHead: false)
        try await transport.execute(Self.request(server.url(for: "/big")), consumer: consumer)
        #expect(consumer.state.withLock { $0.heads } == 1)
        #expect(consumer.state.withLock { $0.bytes } == 0)
    }
}
