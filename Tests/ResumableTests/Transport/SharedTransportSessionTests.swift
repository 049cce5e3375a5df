import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// A ``SharedTransportSession`` carries the requests of many download tasks (a queue's): requests to one origin reuse
/// each other's kept-alive connections, requests configured differently never share one, and only the owner closes
/// it. Connections are counted by the loopback server (``RecordedRequest/connection``).
@Suite("Shared transport sessions")
struct SharedTransportSessionTests {
    static let transports: [TransportKind] = [.libcurl, .urlSession]

    static func request(_ url: URL, tls: DownloadTask.TLS = .default) -> TransportRequest {
        var request = TransportSessionTests.request(url)
        request.tls = tls
        return request
    }

    /// A configuration for downloads through `shared`: one connection each, fast retries, a long idle timeout.
    static func configuration(_ shared: SharedTransportSession, retries: Int = 3) -> DownloadTask.Configuration {
        var configuration = DownloadFixture.configuration(retries: retries, transport: shared.transport)
        configuration.connections = .single
        configuration.sharedSession = shared
        return configuration
    }

    /// Runs `body` in a task and returns the error it threw, or `nil`.
    static func outcome(_ body: @escaping @Sendable () async throws(ResumableError) -> Void) -> Task<
        ResumableError?, Never
    > {
        Task { () async -> ResumableError? in
            do throws(ResumableError) {
                try await body()
                return nil
            } catch {
                return error
            }
        }
    }

    @Test("20 downloads one after another through a shared session use one connection", arguments: transports)
    func sequentialDownloadsReuseOneConnection(transport: TransportKind) async throws {
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        let directory = try TemporaryDirectory()
        let shared = try SharedTransportSession.makeShared(transport)
        defer { shared.close() }
        #expect(shared.transport == transport)
        for index in 0..<20 {
            let content = testBytes(count: 20_000 + index, seed: UInt64(100 + index))
            server.register(.bytes(content), at: "/file\(index).bin")
            let task = try DownloadTask(
                url: server.url(for: "/file\(index).bin"), destination: .directory(directory.url),
                configuration: Self.configuration(shared))
            let result = try await task.value
            try expectSameBytes(Data(contentsOf: result.fileURL), Data(content))
            #expect(result.transport == transport)
        }
        // Each task closed its lease and none closed the shared session: every download after the first reused the
        // connection the first opened.
        #expect(!shared.isClosed)
        let connections = server.requests.map(\.connection)
        #expect(connections.count == 20)
        #expect(Set(connections).count == 1, "one kept-alive connection: \(connections)")
    }

    @Test("8 requests at once, then 8 more, use the 8 connections the first opened", arguments: transports)
    func concurrentRequestsReuseTheirConnections(transport: TransportKind) async throws {
        let content = testBytes(count: 100_000, seed: 31)
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        server.register(.bytes(content), at: "/file.bin")
        let gate = BodyGate(holdingAfter: 1000)
        server.register(.bytes(content, behavior: Behavior(gate: gate)), at: "/held.bin")
        let shared = try SharedTransportSession.makeShared(transport)
        defer { shared.close() }
        // The first 8 are all held at once, so they are on 8 connections of their own.
        let consumers = (0..<8).map { _ in RecordingConsumer(keepsBytes: true) }
        let running = consumers.map { consumer in
            Self.outcome { () async throws(ResumableError) in
                try await shared.execute(Self.request(server.url(for: "/held.bin")), consumer: consumer)
            }
        }
        #expect(await gate.waitUntilHeld(count: 8))
        gate.open()
        for task in running { #expect(await task.value == nil) }
        for consumer in consumers { expectSameBytes(consumer.state.withLock { $0.received }, content) }
        let first = Set(server.requests.map(\.connection))
        #expect(first.count == 8)
        let more = (0..<8).map { _ in
            Self.outcome { () async throws(ResumableError) in
                try await shared.execute(Self.request(server.url(for: "/file.bin")), consumer: RecordingConsumer())
            }
        }
        for task in more { #expect(await task.value == nil) }
        let all = server.requests.map(\.connection)
        #expect(all.count == 16)
        #expect(Set(all) == first, "the second 8 reuse the first 8's connections: \(all)")
    }

    @Test(
        "Two origins are kept side by side; each request goes back to its own origin's connection",
        arguments: transports)
    func originsKeptApart(transport: TransportKind) async throws {
        let content = testBytes(count: 30_000, seed: 32)
        let first = try LoopbackServer(configuration: .init(keepAlive: true))
        let second = try LoopbackServer(configuration: .init(keepAlive: true))
        first.register(.bytes(content), at: "/file.bin")
        second.register(.bytes(content), at: "/file.bin")
        let shared = try SharedTransportSession.makeShared(transport)
        defer { shared.close() }
        for server in [first, second, first, second, first, second] {
            let consumer = RecordingConsumer(keepsBytes: true)
            try await shared.execute(Self.request(server.url(for: "/file.bin")), consumer: consumer)
            expectSameBytes(consumer.state.withLock { $0.received }, content)
        }
        #expect(first.requests.map(\.connection) == [1, 1, 1])
        #expect(second.requests.map(\.connection) == [1, 1, 1])
    }

    @Test("Requests to one origin with different TLS settings never share a libcurl connection")
    func curlTLSSettingsKeptApart() async throws {
        let content = testBytes(count: 30_000, seed: 33)
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        server.register(.bytes(content), at: "/file.bin")
        let directory = try TemporaryDirectory()
        let trustA = directory.url.appendingPathComponent("a.pem")
        let trustB = directory.url.appendingPathComponent("b.pem")
        try Data("a".utf8).write(to: trustA)
        try Data("b".utf8).write(to: trustB)
        let settings = [
            DownloadTask.TLS(trust: .pemFile(trustA)), DownloadTask.TLS(trust: .pemFile(trustB)),
            DownloadTask.TLS(trust: .pemFile(trustA)), DownloadTask.TLS(trust: .pemFile(trustB)),
        ]
        let shared = try SharedTransportSession.makeShared(.libcurl)
        defer { shared.close() }
        // Plain http: curl itself would reuse one connection whatever the TLS options say; the cache must not.
        for tls in settings {
            try await shared.execute(
                Self.request(server.url(for: "/file.bin"), tls: tls), consumer: RecordingConsumer())
        }
        let connections = server.requests.map(\.connection)
        #expect(connections.count == 4)
        #expect(connections[0] == connections[2] && connections[1] == connections[3], "\(connections)")
        #expect(connections[0] != connections[1], "\(connections)")
    }

    @Test("A libcurl connection is keyed on origin, proxy and credentials, and every TLS setting")
    func curlConnectionKey() throws {
        let url = try #require(URL(string: "https://Example.com/a"))
        let base = TransportRequest(url: url, headers: [], idleTimeout: .seconds(1))
        let direct = ProxyRoute.direct("test")
        func key(_ change: (inout TransportRequest) -> Void = { _ in }, route: ProxyRoute = direct)
            -> CurlConnectionKey
        {
            var request = base
            change(&request)
            return CurlConnectionKey(request, route: route)
        }
        let reference = key()
        #expect(reference.port == 443)
        #expect(reference.host == "example.com")
        // Another path, other headers or timeouts: the same connection.
        #expect(
            key {
                $0.url = URL(string: "https://example.com:443/b")!
                $0.headers = [HTTPHeader(name: "Authorization", value: "x")]
                $0.idleTimeout = .seconds(9)
            } == reference)
        let proxy = ProxyAddress(host: "proxy", port: 8080, credentials: nil)
        var withUser = proxy
        withUser.credentials = .init(user: "u", password: "p")
        var otherPassword = proxy
        otherPassword.credentials = .init(user: "u", password: "q")
        let others: [CurlConnectionKey] = [
            key { $0.url = URL(string: "http://example.com/a")! },
            key { $0.url = URL(string: "https://example.com:8443/a")! },
            key { $0.url = URL(string: "https://example.org/a")! },
            key(route: ProxyRoute(proxy: proxy, reason: "test")),
            key(route: ProxyRoute(proxy: withUser, reason: "test")),
            key(route: ProxyRoute(proxy: otherPassword, reason: "test")),
            key { $0.tls = DownloadTask.TLS(trust: .pemFile(URL(fileURLWithPath: "/ca.pem"))) },
            key { $0.tls = DownloadTask.TLS(trust: .pemDirectory(URL(fileURLWithPath: "/ca"))) },
            key { $0.tls = DownloadTask.TLS(clientCertificate: .init(certificate: URL(fileURLWithPath: "/c.pem"))) },
            key {
                $0.tls = DownloadTask.TLS(
                    clientCertificate: .init(certificate: URL(fileURLWithPath: "/c.pem"), passphrase: "other"))
            },
            key { $0.tls = DownloadTask.TLS(pinnedPublicKey: .sha256(["abc="])) },
        ]
        #expect(Set(others + [reference]).count == others.count + 1)
    }

    @Test("Idle connections beyond the limit are closed, the least recently used first")
    func curlIdleLimit() async throws {
        let content = testBytes(count: 10_000, seed: 34)
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        server.register(.bytes(content), at: "/file.bin")
        let gate = BodyGate(holdingAfter: 100)
        server.register(.bytes(content, behavior: Behavior(gate: gate)), at: "/held.bin")
        let library = try CurlLibrary.load().get()
        let cache = CurlConnectionCache(library: library, idleLimit: 2)
        let session = CurlTransport(library: library, connections: cache)
        defer { session.close() }
        let running = (0..<3).map { _ in
            Self.outcome { () async throws(ResumableError) in
                try await session.execute(Self.request(server.url(for: "/held.bin")), consumer: RecordingConsumer())
            }
        }
        #expect(await gate.waitUntilHeld(count: 3))
        gate.open()
        for task in running { #expect(await task.value == nil) }
        #expect(cache.idleCount == 2)
        // Two of the three connections are kept: three more requests at once open exactly one new connection.
        let opened = Set(server.requests.map(\.connection))
        let secondGate = BodyGate(holdingAfter: 100)
        server.register(.bytes(content, behavior: Behavior(gate: secondGate)), at: "/held-again.bin")
        let again = (0..<3).map { _ in
            Self.outcome { () async throws(ResumableError) in
                try await session.execute(
                    Self.request(server.url(for: "/held-again.bin")), consumer: RecordingConsumer())
            }
        }
        #expect(await secondGate.waitUntilHeld(count: 3))
        secondGate.open()
        for task in again { #expect(await task.value == nil) }
        let later = server.requests.suffix(3).map(\.connection)
        #expect(Set(later).subtracting(opened).count == 1, "\(later) after \(opened)")
        #expect(cache.idleCount == 2)
    }

    @Test("Closing a shared session cancels every request in flight, and the tasks fail", arguments: transports)
    func closeCancelsRunningTransfers(transport: TransportKind) async throws {
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        let gate = BodyGate(holdingAfter: 1000)
        server.register(.bytes(testBytes(count: 100_000), behavior: Behavior(gate: gate)), at: "/held.bin")
        let directory = try TemporaryDirectory()
        let shared = try SharedTransportSession.makeShared(transport)
        let request = Self.outcome { () async throws(ResumableError) in
            try await shared.execute(Self.request(server.url(for: "/held.bin")), consumer: RecordingConsumer())
        }
        let task = try DownloadTask(
            url: server.url(for: "/held.bin"), destination: .directory(directory.url),
            configuration: Self.configuration(shared))
        #expect(await gate.waitUntilHeld(count: 2))
        shared.close()
        let error = await request.value
        #expect(error?.code == .cancelled)
        #expect(error?.message == SharedTransportSession.closedError.message)
        let taskError = await failure(of: task)
        #expect(taskError?.code == .cancelled, "\(String(describing: taskError))")
        #expect(server.requests.count == 2, "nothing was retried on a closed session")
        gate.open()
    }

    @Test("A closed shared session refuses requests and tasks with a typed error", arguments: transports)
    func closedSessionRefuses(transport: TransportKind) async throws {
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        server.register(.bytes(testBytes(count: 1000)), at: "/file.bin")
        let directory = try TemporaryDirectory()
        let shared = try SharedTransportSession.makeShared(transport)
        try await shared.execute(Self.request(server.url(for: "/file.bin")), consumer: RecordingConsumer())
        let lease = shared.lease()
        shared.close()
        shared.close()
        let consumer = RecordingConsumer()
        for session in [shared, lease] as [any TransportSession] {
            let error = await #expect(throws: ResumableError.self) {
                try await session.execute(Self.request(server.url(for: "/file.bin")), consumer: consumer)
            }
            #expect(error?.code == .cancelled)
        }
        let task = try DownloadTask(
            url: server.url(for: "/file.bin"), destination: .directory(directory.url),
            configuration: Self.configuration(shared))
        let error = await failure(of: task)
        #expect(error?.code == .cancelled)
        #expect(consumer.state.withLock { $0.heads } == 0)
        #expect(server.requests.count == 1)
        #expect(directory.contents().isEmpty, "\(directory.contents())")
    }

    @Test("Closing a lease ends only the lease: the shared session and its connection stay", arguments: transports)
    func leaseCloseKeepsSharedSession(transport: TransportKind) async throws {
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        server.register(.bytes(testBytes(count: 5000)), at: "/file.bin")
        let shared = try SharedTransportSession.makeShared(transport)
        defer { shared.close() }
        let lease = shared.lease()
        try await lease.execute(Self.request(server.url(for: "/file.bin")), consumer: RecordingConsumer())
        lease.close()
        await #expect(throws: ResumableError.self) {
            try await lease.execute(Self.request(server.url(for: "/file.bin")), consumer: RecordingConsumer())
        }
        try await shared.lease().execute(Self.request(server.url(for: "/file.bin")), consumer: RecordingConsumer())
        #expect(server.requests.map(\.connection) == [1, 1])
    }

    /// Not a timed test: prints how long 1,000 sequential 256 KiB downloads take through one shared session and
    /// through a session per task. Run with `RESUMABLE_POOL_MEASURE=1`.
    @Test(
        "Measurement: 1,000 sequential downloads, shared session vs one per task",
        .serialized, .enabled(if: ProcessInfo.processInfo.environment["RESUMABLE_POOL_MEASURE"] != nil),
        arguments: transports)
    func measureSequentialDownloads(transport: TransportKind) async throws {
        let count = Int(ProcessInfo.processInfo.environment["RESUMABLE_POOL_MEASURE_COUNT"] ?? "") ?? 1000
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        server.register(.generated(length: 256 * 1024, seed: 35), at: "/file.bin")
        for shared in [false, true] {
            let directory = try TemporaryDirectory()
            let session = try shared ? SharedTransportSession.makeShared(transport) : nil
            defer { session?.close() }
            let before = server.requests.count
            let clock = ContinuousClock()
            let start = clock.now
            for _ in 0..<count {
                var configuration = DownloadFixture.configuration(existingFile: .overwrite, transport: transport)
                configuration.connections = .single
                configuration.sharedSession = session
                let task = try DownloadTask(
                    url: server.url(for: "/file.bin"), destination: .file(directory.url.appendingPathComponent("f")),
                    configuration: configuration)
                _ = try await task.value
            }
            let elapsed = clock.now - start
            let connections = Set(server.requests.dropFirst(before).map(\.connection)).count
            print(
                "MEASURE \(transport) \(shared ? "shared" : "per-task"): \(count) × 256 KiB in \(elapsed), "
                    + "\(connections) connections")
        }
        // The transport alone (no file, no token): what the connections cost.
        for shared in [false, true] {
            let session = try shared ? SharedTransportSession.makeShared(transport) : nil
            defer { session?.close() }
            let before = server.requests.count
            let clock = ContinuousClock()
            let start = clock.now
            for _ in 0..<count {
                let request = Self.request(server.url(for: "/file.bin"))
                if let session {
                    try await session.execute(request, consumer: RecordingConsumer())
                } else {
                    try await transport.execute(request, consumer: RecordingConsumer())
                }
            }
            let elapsed = clock.now - start
            let connections = Set(server.requests.dropFirst(before).map(\.connection)).count
            print(
                "MEASURE \(transport) requests only, \(shared ? "shared" : "a session each"): \(count) × 256 KiB in "
                    + "\(elapsed), \(connections) connections")
        }
    }
}
