import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The URLSession transport bounds what waits for a slow consumer (``URLSessionDeliveryQueue``, Linux only): the
/// thread that reads the socket is held back at the high-water mark, downloads stay byte-exact, pause and resume
/// work while it is held back, and nothing deadlocks.
///
/// Deterministic: a consumer (or the download's event handler) is blocked until the test has seen the transport
/// hold the network back, so the queue certainly fills; the marks are small so that it fills after a few chunks.
@Suite("URLSession flow control")
struct URLSessionFlowControlTests {
    /// Small marks: the session stops reading once 16 chunks of at most 16 KiB wait.
    static let limits = URLSessionFlowControl(highWater: 16, lowWater: 4)
    /// The most callbacks that may wait: the high-water mark, plus what the socket event that reached it delivers
    /// (curl reads at most about 100 times per event, 16 KiB each), with some room. Unbounded, the tests' bodies put
    /// hundreds in the queue.
    static let bound = limits.highWater + 128

    static func request(_ url: URL) -> TransportRequest {
        TransportRequest(
            url: url, headers: [HTTPHeader(name: "Accept-Encoding", value: "identity")], idleTimeout: .seconds(600))
    }

    #if canImport(FoundationNetworking)
        @Test("A blocked consumer holds the network back at the high-water mark; the body then arrives byte-exact")
        func holdsTheNetworkBack() async throws {
            let length = 8 << 20
            let server = try LoopbackServer()
            server.register(.generated(length: Int64(length), seed: 41), at: "/big")
            let transport = URLSessionTransport(flowControl: Self.limits)
            defer { transport.close() }
            let gate = Latch()
            let consumer = GatedConsumer(blockingAt: 1, on: gate)
            let download = Task {
                try await transport.execute(Self.request(server.url(for: "/big")), consumer: consumer)
            }

            let held = try await waitUntil { transport.deliveryStatistics.holds >= 1 }
            let statistics = transport.deliveryStatistics
            gate.open()
            try await download.value

            #expect(held, "the delivery queue never held the network back: \(statistics)")
            // While the consumer was blocked, the session stopped at the high-water mark (the blocked callback
            // included), give or take one socket event: a few hundred KiB of the 8 MiB body; the rest stayed in the
            // socket and the server.
            #expect(statistics.peakWaiting >= Self.limits.highWater, "\(statistics)")
            #expect(consumer.state.withLock { $0.chunksBeforeRelease } == 1)
            #expect(consumer.state.withLock { $0.largestChunk } <= 16 * 1024)
            expectSameBytes(consumer.state.withLock { $0.received }, testBytes(count: length, seed: 41))
            #expect(transport.deliveryStatistics.peakWaiting <= Self.bound, "\(transport.deliveryStatistics)")
        }

        @Test("While one session is held back, another session's download goes on")
        func otherSessionsGoOn() async throws {
            let server = try LoopbackServer()
            server.register(.generated(length: 8 << 20, seed: 45), at: "/held")
            server.register(.generated(length: 4 << 20, seed: 46), at: "/other")
            let held = URLSessionTransport(flowControl: Self.limits)
            defer { held.close() }
            let gate = Latch()
            let heldConsumer = GatedConsumer(blockingAt: 1, on: gate)
            let heldDownload = Task {
                try await held.execute(Self.request(server.url(for: "/held")), consumer: heldConsumer)
            }
            try #require(await waitUntil { held.deliveryStatistics.holds >= 1 }, "\(held.deliveryStatistics)")

            // FoundationNetworking runs every session on one serial queue: a blocked thread would stop this one too.
            let other = URLSessionTransport(flowControl: Self.limits)
            defer { other.close() }
            let otherConsumer = GatedConsumer(blockingAt: 0, on: Latch())
            var otherError: ResumableError?
            do {
                try await other.execute(Self.request(server.url(for: "/other")), consumer: otherConsumer)
            } catch {
                otherError = error
            }
            let stillHeld = heldConsumer.state.withLock { $0.chunksBeforeRelease } == 0
            gate.open()
            try await heldDownload.value

            #expect(otherError == nil, "\(String(describing: otherError))")
            #expect(stillHeld, "the other download ran while the first consumer was blocked")
            expectSameBytes(otherConsumer.state.withLock { $0.received }, testBytes(count: 4 << 20, seed: 46))
            expectSameBytes(heldConsumer.state.withLock { $0.received }, testBytes(count: 8 << 20, seed: 45))
            #expect(held.deliveryStatistics.peakWaiting <= Self.bound, "\(held.deliveryStatistics)")
        }

        @Test("A consumer that makes a URLSession task while its session is held back is not blocked")
        func consumerUsingURLSessionIsNotBlocked() async throws {
            let length = 2 << 20
            let server = try LoopbackServer()
            server.register(.generated(length: Int64(length), seed: 42), at: "/big")
            let transport = URLSessionTransport(flowControl: Self.limits)
            defer { transport.close() }
            // On its first chunk the consumer waits until the session is held back, then makes a data task in another
            // session, which waits for the one work queue every URLSession shares: a held-back session must not
            // hold that queue (a blocked thread would, and this would deadlock).
            let consumer = URLSessionUsingConsumer(transport: transport, url: server.url(for: "/big"))
            try await transport.execute(Self.request(server.url(for: "/big")), consumer: consumer)

            let statistics = transport.deliveryStatistics
            #expect(consumer.state.withLock { $0.sawHold }, "\(statistics)")
            #expect(consumer.state.withLock { $0.madeTask })
            expectSameBytes(consumer.state.withLock { $0.received }, testBytes(count: length, seed: 42))
        }

        @Test("Closing a session while it is held back ends its request")
        func closeReleasesTheHeldThread() async throws {
            // An endless body: the request can only end by the close.
            let server = try CountingServer()
            let transport = URLSessionTransport(flowControl: Self.limits)
            let gate = Latch()
            let consumer = GatedConsumer(blockingAt: 1, on: gate, keepsBytes: false)
            let download = Task { try await transport.execute(Self.request(server.url), consumer: consumer) }
            try #require(await waitUntil { transport.deliveryStatistics.holds >= 1 }, "never held back")

            // close() resumes the suspended session first (a suspended dispatch queue must never be deallocated),
            // then invalidates it; it returns once the blocked consumer call has returned.
            let closed = Atomic<Bool>(false)
            let closing = Thread {
                transport.close()
                closed.store(true, ordering: .releasing)
            }
            closing.start()
            gate.open()
            let error = await #expect(throws: ResumableError.self) { try await download.value }
            let closedInTime = try await waitUntil { closed.load(ordering: .acquiring) }

            #expect(error?.code == .cancelled)
            #expect(closedInTime)
        }

        @Test("Pause and resume while the network is held back: the token's bytes and the finished file are exact")
        func pauseAndResumeWhileHeldBack() async throws {
            let length = 8 << 20
            let content = testBytes(count: length, seed: 44)
            let fixture = try DownloadFixture()
            // The server holds the body after 6 MiB, so that the first download cannot finish before its pause.
            let serverGate = fixture.serveHeld(.generated(length: Int64(length), seed: 44), after: 6 << 20)

            // The first download: its event handler blocks on the first progress with bytes on disk, so the
            // delivery queue fills and holds the network back; the download is paused in that state.
            let first = URLSessionTransport(flowControl: Self.limits)
            defer { first.close() }
            let firstGate = Latch()
            let task = try fixture.download(configuration: Self.configuration(first, blockingOn: firstGate, after: 0))
            try #require(await waitUntil { first.deliveryStatistics.holds >= 1 }, "\(first.deliveryStatistics)")
            #expect(first.deliveryStatistics.peakWaiting >= Self.limits.highWater)
            let pausing = Task { await task.cancelProducingResumeData() }
            firstGate.open()
            let token = try #require(await pausing.value, "the pause produced no token")

            #expect(first.deliveryStatistics.peakWaiting <= Self.bound, "\(first.deliveryStatistics)")
            #expect(token.offset > 0 && token.offset <= 6 << 20, "offset \(token.offset)")
            let partial = try fixture.contents(of: URL(fileURLWithPath: token.tempPath))
            #expect(partial.count == Int(token.offset))
            expectSameBytes(
                partial, Array(content[0..<Int(token.offset)]), "the temporary file is the body's first bytes")

            // The resumed download, held back the same way before it goes on to the end.
            serverGate.open()
            let second = URLSessionTransport(flowControl: Self.limits)
            defer { second.close() }
            let secondGate = Latch()
            let resumed = try fixture.resumeThroughDisk(
                token, configuration: Self.configuration(second, blockingOn: secondGate, after: token.offset))
            try #require(await waitUntil { second.deliveryStatistics.holds >= 1 }, "\(second.deliveryStatistics)")
            secondGate.open()
            let result = try await resumed.value
            #expect(second.deliveryStatistics.peakWaiting <= Self.bound, "\(second.deliveryStatistics)")

            #expect(result.resumedAtOffset == token.offset)
            try expectSameBytes(fixture.contents(of: result.fileURL), content)
            #expect(fixture.ranges() == [nil, "bytes=\(token.offset)-"])
            #expect(fixture.temporaryFiles().isEmpty)
        }
    #endif

    @Test("The URLSession transport of a download task has the default flow control")
    func downloadTasksUseTheDefaultFlowControl() throws {
        let session = try DownloadTask.Transport.urlSession.makeSession()
        defer { session.close() }
        let transport = try #require(session as? URLSessionTransport)
        #expect(transport.flowControl == .default)
        #expect((URLSessionFlowControl.default.highWater + 101) * 16 * 1024 <= 3 << 20, "at most 3 MiB per download")
        #expect(URLSessionFlowControl.default.lowWater < URLSessionFlowControl.default.highWater)
    }

    /// A configuration whose requests go through `transport`, and whose event handler blocks at `gate` on the first
    /// progress past `offset` bytes on disk: on the thread that delivers the body, so the delivery queue fills.
    static func configuration(_ transport: URLSessionTransport, blockingOn gate: Latch, after offset: Int64)
        -> DownloadTask.Configuration
    {
        var configuration = DownloadFixture.configuration(retries: 0, transport: .custom(transport))
        configuration.progressInterval = .zero
        // One connection: the delivery queue of one transfer is what is measured.
        configuration.connections = .single
        configuration.eventHandler = { event in
            if case .progress(let progress) = event, progress.bytesOnDisk > offset {
                gate.passOrWaitFirstTime()
            }
        }
        return configuration
    }
}

/// Blocks the first caller until ``open()``; every later caller passes.
final class Latch: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private let first = Atomic<Bool>(true)

    /// Waits until ``open()`` when this is the first call; returns at once otherwise.
    func passOrWaitFirstTime() {
        if first.exchange(false, ordering: .acquiringAndReleasing) {
            // Bounded: a test that fails before opening must not leave a thread blocked for good (the test process
            // would never exit).
            _ = semaphore.wait(timeout: .now() + 300)
        }
    }

    func open() {
        semaphore.signal()
    }
}

/// Keeps the body, and blocks at a latch on its `blockingAt`-th chunk.
final class GatedConsumer: ResponseConsumer, Sendable {
    struct State {
        var received: [UInt8] = []
        var chunks = 0
        var largestChunk = 0
        /// How many chunks had arrived when the latch opened.
        var chunksBeforeRelease = 0
    }

    let state = Mutex(State())
    private let blockingAt: Int
    private let gate: Latch
    private let keepsBytes: Bool

    init(blockingAt: Int, on gate: Latch, keepsBytes: Bool = true) {
        self.blockingAt = blockingAt
        self.gate = gate
        self.keepsBytes = keepsBytes
    }

    func receive(_ head: ResponseHead) -> Bool { head.status == 200 }

    func receive(_ body: UnsafeRawBufferPointer) throws(ResumableError) {
        let chunk = state.withLock { state in
            state.chunks += 1
            state.largestChunk = max(state.largestChunk, body.count)
            if keepsBytes { state.received.append(contentsOf: body) }
            return state.chunks
        }
        if chunk == blockingAt {
            gate.passOrWaitFirstTime()
            state.withLock { $0.chunksBeforeRelease = $0.chunks }
        }
    }
}

#if canImport(FoundationNetworking)
    /// On its first chunk, waits until `transport` is held back, then makes (and cancels) a data task in a session
    /// of its own, which needs FoundationNetworking's shared work queue; keeps the body.
    final class URLSessionUsingConsumer: ResponseConsumer, Sendable {
        struct State {
            var received: [UInt8] = []
            var sawHold = false
            var madeTask = false
        }

        let state = Mutex(State())
        private let transport: URLSessionTransport
        private let url: URL

        init(transport: URLSessionTransport, url: URL) {
            self.transport = transport
            self.url = url
        }

        func receive(_ head: ResponseHead) -> Bool { head.status == 200 }

        func receive(_ body: UnsafeRawBufferPointer) throws(ResumableError) {
            let first = state.withLock { state in
                defer { state.received.append(contentsOf: body) }
                return state.received.isEmpty
            }
            guard first else { return }
            // Waits for a condition, not for time: the session is held back once 16 chunks wait behind this one.
            let clock = ContinuousClock()
            let deadline = clock.now + Waiting.deadline
            while transport.deliveryStatistics.holds == 0, clock.now < deadline { usleep(1000) }
            let sawHold = transport.deliveryStatistics.holds > 0
            let session = URLSession(configuration: .ephemeral)
            let task = session.dataTask(with: url)
            task.cancel()
            // Not invalidateAndCancel(): corelibs reads the session's task registry off its work queue there, racing
            // the cancelled task's removal from it (a trap of the whole test process, seen by the library in a soak).
            session.finishTasksAndInvalidate()
            state.withLock { state in
                state.sawHold = sawHold
                state.madeTask = true
            }
        }
    }
#endif
