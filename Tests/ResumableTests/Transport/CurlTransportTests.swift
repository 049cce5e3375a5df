import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What only the libcurl transport has to prove: prompt cancellation, exact request headers, large buffers,
/// error mapping, and what happens when libcurl cannot be loaded. Behaviour shared with the URLSession
/// transport is covered by the end-to-end suites, which run on both.
@Suite("libcurl transport")
struct CurlTransportTests {
    static func transport() throws -> CurlTransport {
        CurlTransport(library: try CurlLibrary.load().get())
    }

    /// A request with a long idle timeout by default: a test that cancels must never race the timeout, however long
    /// the busy cooperative pool keeps the test from cancelling.
    static func request(_ url: URL, idleTimeout: Duration = .seconds(600), headers: [HTTPHeader]? = nil)
        -> TransportRequest
    {
        TransportRequest(
            url: url,
            headers: headers ?? [HTTPHeader(name: "Accept-Encoding", value: "identity")],
            idleTimeout: idleTimeout
        )
    }

    /// How soon a cancellation must end a request. With `curl_multi_wakeup` it takes a few milliseconds; without,
    /// it would wait for `curl_multi_poll`'s timeout (up to a second) or the next data. The bound sits far above
    /// the former, so that threads kept waiting by a busy machine (the whole suite runs in parallel, maybe beside
    /// other work) cannot fail it, and well below the latter.
    static let promptly: Duration = .milliseconds(500)

    /// Runs `execute` on its own thread's executor, cancels it once `ready` returns, and returns how long
    /// `execute` took to return after the cancellation, with its error.
    ///
    /// The time is taken where `execute` returns, on an executor of its own: with the whole suite running in
    /// parallel, the shared cooperative pool (one thread per core) can be busy for long stretches, and that wait
    /// says nothing about the transport.
    static func cancellationDelay(
        of request: TransportRequest,
        consumer: RecordingConsumer = RecordingConsumer(),
        once ready: @Sendable () async -> Void
    ) async throws -> (Duration, ResumableError?) {
        let transport = try Self.transport()
        let clock = ContinuousClock()
        let task = Task(executorPreference: DedicatedThreadExecutor.shared) {
            () async -> (ContinuousClock.Instant, ResumableError?) in
            do throws(ResumableError) {
                try await transport.execute(request, consumer: consumer)
                return (clock.now, nil)
            } catch {
                return (clock.now, error)
            }
        }
        await ready()
        let cancelledAt = clock.now
        task.cancel()
        let (returnedAt, error) = await task.value
        return (returnedAt - cancelledAt, error)
    }

    @Test("Cancelling stops a request to a server that never answers at once")
    func cancelWhileStalledBeforeHead() async throws {
        let listener = try StalledListener()
        let (elapsed, error) = try await Self.cancellationDelay(of: Self.request(listener.url)) {
            try? await Task.sleep(for: .milliseconds(100))
        }
        #expect(error?.code == .cancelled)
        #expect(elapsed < Self.promptly, "took \(elapsed)")
    }

    @Test("Cancelling stops a body that trickles at once, and nothing reaches the consumer afterwards")
    func cancelWhileBodyTrickles() async throws {
        let server = try LoopbackServer()
        server.register(
            .generated(length: 10_000_000, seed: 3, behavior: Behavior(throttleBytesPerSecond: 20_000)), at: "/slow")
        let consumer = RecordingConsumer()
        let (elapsed, error) = try await Self.cancellationDelay(
            of: Self.request(server.url(for: "/slow")), consumer: consumer
        ) {
            while consumer.state.withLock({ $0.bytes }) == 0 { try? await Task.sleep(for: .milliseconds(5)) }
        }
        #expect(error?.code == .cancelled)
        #expect(elapsed < Self.promptly, "took \(elapsed)")
        let bytes = consumer.state.withLock { $0.bytes }
        try await Task.sleep(for: .milliseconds(100))
        #expect(consumer.state.withLock { $0.bytes } == bytes, "no callback after execute returned")
    }

    @Test("Cancelling stops a fast transfer within one buffer")
    func cancelWhileDataPours() async throws {
        let server = try LoopbackServer()
        // A body no test run can finish (1 TB): the transfer must end by cancellation even when a loaded machine
        // lets it pour for a long time before `ready` sees 10 MB.
        server.register(.generated(length: 1_000_000_000_000, seed: 5), at: "/huge")
        let consumer = RecordingConsumer()
        let (elapsed, error) = try await Self.cancellationDelay(
            of: Self.request(server.url(for: "/huge")), consumer: consumer
        ) {
            while consumer.state.withLock({ $0.bytes }) < 10_000_000 { try? await Task.sleep(for: .milliseconds(2)) }
        }
        #expect(error?.code == .cancelled)
        #expect(elapsed < Self.promptly, "took \(elapsed)")
    }

    @Test("A download task cancelled while the server is silent ends long before its idle timeout, leaving nothing")
    func downloadTaskCancelledWhileStalled() async throws {
        let listener = try StalledListener()
        let directory = try TemporaryDirectory()
        var configuration = DownloadFixture.configuration(transport: .libcurl)
        configuration.idleTimeout = .seconds(600)
        let task = try DownloadTask(
            url: listener.url,
            destination: .directory(directory.url),
            configuration: configuration
        )
        try await Task.sleep(for: .milliseconds(100))
        let clock = ContinuousClock()
        let start = clock.now
        task.cancel()
        let error = try #require(await failure(of: task))
        // Measured on the shared pool, which a parallel run keeps busy, so bounded loosely: the point is that the
        // cancellation did not wait for the idle timeout (the transport's own delay is measured above).
        #expect(clock.now - start < .seconds(300), "the idle timeout is 600 s")
        #expect(error.code == .cancelled)
        #expect(directory.contents().isEmpty)
    }

    @Test("A silent server fails with timedOut after the idle timeout, to the millisecond rather than the second")
    func idleTimeout() async throws {
        let listener = try StalledListener()
        let transport = try Self.transport()
        let clock = ContinuousClock()
        let (elapsed, error) = await Task(executorPreference: DedicatedThreadExecutor.shared) {
            () async -> (Duration, ResumableError?) in
            let start = clock.now
            do throws(ResumableError) {
                try await transport.execute(
                    Self.request(listener.url, idleTimeout: .milliseconds(300)), consumer: RecordingConsumer())
                return (clock.now - start, nil)
            } catch {
                return (clock.now - start, error)
            }
        }.value
        #expect(error?.code == .timedOut)
        #expect(elapsed >= .milliseconds(300))
        #expect(elapsed < .milliseconds(900), "took \(elapsed)")
    }

    @Test("The request carries exactly the engine's headers: Accept-Encoding identity once, no Accept, no User-Agent")
    func exactRequestHeaders() async throws {
        let server = try LoopbackServer()
        server.register(.bytes(testBytes(count: 1000)), at: "/file.bin")
        let consumer = RecordingConsumer()
        try await Self.transport().execute(
            Self.request(
                server.url(for: "/file.bin"),
                headers: [
                    HTTPHeader(name: "Accept-Encoding", value: "identity"),
                    HTTPHeader(name: "X-Client", value: "tests"),
                    HTTPHeader(name: "X-Empty", value: ""),
                    HTTPHeader(name: "Range", value: "bytes=10-"),
                ]),
            consumer: consumer
        )
        let request = try #require(server.requests(for: "/file.bin").first)
        #expect(request.method == "GET")
        #expect(request.version == "HTTP/1.1")
        #expect(request.headerValues("Accept-Encoding") == ["identity"])
        #expect(request.header("X-Client") == "tests")
        #expect(request.headerValues("X-Empty") == [""])
        #expect(request.header("Range") == "bytes=10-")
        #expect(
            Set(request.headers.map { $0.name.lowercased() })
                == ["host", "accept-encoding", "x-client", "x-empty", "range"])
        #expect(consumer.state.withLock { $0.head?.status } == 206)
        #expect(consumer.state.withLock { $0.bytes } == 990)
    }

    @Test("A gzip body sent despite identity is decoded, and its head still says gzip")
    func gzipDecoded() async throws {
        let server = try LoopbackServer()
        let content = testBytes(count: 200_000)
        server.enqueue(
            ScriptedResponse(
                status: 200, headers: [HeaderField("Content-Encoding", "gzip")],
                body: try await GzipFixture.compress(content)),
            for: "/file.bin")
        let consumer = RecordingConsumer(keepsBytes: true)
        try await Self.transport().execute(Self.request(server.url(for: "/file.bin")), consumer: consumer)
        #expect(consumer.state.withLock { $0.head?.value("Content-Encoding") } == "gzip")
        expectSameBytes(consumer.state.withLock { $0.received }, content)
    }

    @Test("Body bytes come straight from curl's buffer, in the largest pieces curl hands a write callback")
    func bodyPieces() async throws {
        let server = try LoopbackServer()
        server.register(.generated(length: 16_000_000, seed: 9), at: "/big")
        let consumer = RecordingConsumer()
        try await Self.transport().execute(Self.request(server.url(for: "/big")), consumer: consumer)
        let (bytes, largest) = consumer.state.withLock { ($0.bytes, $0.largestChunk) }
        #expect(bytes == 16_000_000)
        // curl reads up to CURLOPT_BUFFERSIZE (512 KiB) per recv() but calls the write callback with at most
        // CURL_MAX_WRITE_SIZE (16 KiB) at a time; no copy in between means no piece is ever larger.
        #expect(largest == 16 * 1024)
    }

    @Test("A slow writer slows the transfer instead of filling memory: what is unread stays in the socket")
    func backpressure() async throws {
        let server = try CountingServer()
        let consumer = RecordingConsumer(delayPerChunk: .milliseconds(2))
        let transport = try Self.transport()
        let task = Task { try await transport.execute(Self.request(server.url), consumer: consumer) }
        // The writer has started (however long a busy machine takes to get there), then had time to fall behind.
        #expect(try await waitUntil { consumer.state.withLock { $0.bytes } > 0 })
        try await Task.sleep(for: .milliseconds(600))
        let received = consumer.state.withLock { $0.bytes }
        let sent = server.sent.load(ordering: .relaxed)
        task.cancel()
        _ = await task.result
        #expect(received > 0)
        // Unbounded buffering would have taken hundreds of megabytes from a loopback server by now; what the
        // writer has not taken is bounded by the kernel's socket buffers and curl's one receive buffer.
        #expect(sent - received < 40_000_000, "sent \(sent), written \(received)")
    }

    @Test("A consumer that declines the head ends the request normally without reading the body")
    func declinedHead() async throws {
        let server = try LoopbackServer()
        server.register(.generated(length: 50_000_000, seed: 1), at: "/big")
        let consumer = RecordingConsumer(acceptsHead: false)
        try await Self.transport().execute(Self.request(server.url(for: "/big")), consumer: consumer)
        #expect(consumer.state.withLock { $0.head?.status } == 200)
        #expect(consumer.state.withLock { $0.bytes } == 0)
    }

    @Test("The consumer's error aborts the transfer and is what execute throws")
    func consumerErrorPropagates() async throws {
        let server = try LoopbackServer()
        server.register(.generated(length: 50_000_000, seed: 1), at: "/big")
        let consumer = RecordingConsumer(failsAfter: 100_000)
        let error = await #expect(throws: ResumableError.self) {
            try await Self.transport().execute(Self.request(server.url(for: "/big")), consumer: consumer)
        }
        #expect(error?.code == .diskFull)
        #expect(consumer.state.withLock { $0.bytes } < 5_000_000)
    }

    @Test("Interim 1xx heads are skipped: the consumer gets the final head once")
    func interimHeadsSkipped() async throws {
        let server = try LoopbackServer()
        server.enqueue(
            ScriptedResponse(
                statusLine: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK",
                headers: [HeaderField("Content-Length", "3"), HeaderField("ETag", "\"e\"")],
                body: [1, 2, 3]),
            for: "/file.bin")
        let consumer = RecordingConsumer()
        try await Self.transport().execute(Self.request(server.url(for: "/file.bin")), consumer: consumer)
        let (heads, head, bytes) = consumer.state.withLock { ($0.heads, $0.head, $0.bytes) }
        #expect(heads == 1)
        #expect(head?.status == 200)
        #expect(head?.value("etag") == "\"e\"")
        #expect(bytes == 3)
    }

    @Test(
        "curl failures map to the same error codes as URLSession's",
        arguments: [
            ("refused", ResumableError.Code.network),
            ("reset", .network),
            ("cut", .incompleteBody),
            ("nothing", .network),
            ("not HTTP", .protocolViolation),
            ("bad status", .protocolViolation),
        ])
    func errorMapping(situation: String, expected: ResumableError.Code) async throws {
        let server = try LoopbackServer()
        var url = server.url(for: "/file.bin")
        let body = testBytes(count: 10_000)
        let refusing = try RefusingPort()
        defer { withExtendedLifetime(refusing) {} }
        switch situation {
        case "refused":
            url = URL(string: "http://127.0.0.1:\(refusing.port)/file.bin")!
        case "reset":
            server.enqueue(
                ScriptedResponse(
                    status: 200, headers: [HeaderField("Content-Length", "10000")], body: body,
                    closeAfterBodyBytes: 100, resetOnClose: true),
                for: "/file.bin")
        case "cut":
            server.enqueue(
                ScriptedResponse(
                    status: 200, headers: [HeaderField("Content-Length", "10000")], body: body,
                    closeAfterBodyBytes: 100),
                for: "/file.bin")
        case "nothing":
            url = try StalledListener.closingAfterRequest()
        case "not HTTP":
            server.enqueue(ScriptedResponse(statusLine: "HELLO THERE"), for: "/file.bin")
        default:
            server.enqueue(ScriptedResponse(statusLine: "HTTP/1.1 2x0 Odd"), for: "/file.bin")
        }
        let error = await #expect(throws: ResumableError.self) {
            try await Self.transport().execute(Self.request(url), consumer: RecordingConsumer())
        }
        #expect(error?.code == expected, "\(String(describing: error))")
    }

    @Test("Forcing libcurl when it cannot be loaded fails at creation; automatic falls back to URLSession")
    func unavailableLibrary() async throws {
        let missing = DownloadTask.Transport(kind: .libcurl, libraryName: "libcurl-that-does-not-exist.so.9")
        #expect(!missing.isAvailable)
        #expect(DownloadTask.Transport.libcurl.isAvailable)
        let fixture = try DownloadFixture()
        fixture.serve(.bytes(testBytes(count: 1000)))
        let error = #expect(throws: ResumableError.self) {
            try fixture.download(transport: missing)
        }
        #expect(error?.code == .invalidRequest)
        #expect(error?.message.hasPrefix("libcurl could not be loaded: ") == true, "\(String(describing: error))")
        #expect(fixture.directory.contents().isEmpty, "no temporary file was created")

        let automatic = DownloadTask.Transport(kind: .automatic, libraryName: missing.libraryName)
        #expect(try automatic.resolved() == .urlSession)
        let result = try await fixture.download(transport: automatic).value
        #expect(result.transport == .urlSession)
        try expectSameBytes(fixture.contents(of: result.fileURL), testBytes(count: 1000))
        #expect(try DownloadTask.Transport.automatic.resolved() == .libcurl)
    }

    @Test("Resuming with an unloadable libcurl fails before the token's file is touched")
    func unavailableLibraryOnResume() async throws {
        let fixture = try DownloadFixture(transport: .libcurl)
        fixture.serve(.bytes(testBytes(count: 5000)))
        let token = try await fixture.interruptedToken(after: 1000)
        let missing = DownloadTask.Transport(kind: .libcurl, libraryName: "libcurl-that-does-not-exist.so.9")
        let error = #expect(throws: ResumableError.self) {
            try fixture.resumeThroughDisk(token, transport: missing)
        }
        #expect(error?.code == .invalidRequest)
        let result = try await fixture.resumeThroughDisk(token).value
        #expect(result.resumedAtOffset == 1000)
        #expect(result.transport == .libcurl)
    }

    @Test("A library without curl's functions is refused with the missing symbol named")
    func libraryWithoutCurl() {
        #if canImport(Glibc)
            let result = CurlLibrary.load("libz.so.1")
            guard case .failure(let error) = result else {
                Issue.record("libz loaded as libcurl")
                return
            }
            #expect(error.message.contains("curl_global_init is missing"), "\(error)")
        #endif
    }

    @Test("Header lines become a head: folded lines joined, values trimmed, Latin-1 kept, garbage refused")
    func headCollector() {
        var collector = HeadCollector()
        func feed(_ line: [UInt8]) -> HeadCollector.Step {
            line.withUnsafeBytes { collector.append($0) }
        }
        for line in [
            "HTTP/1.1 206 Partial Content\r\n", "Content-Range:  bytes 0-1/2 \r\n", "X-Folded: a\r\n", "\t b\r\n",
        ] {
            guard case .incomplete = feed(Array(line.utf8)) else {
                Issue.record("\(line) completed the head")
                return
            }
        }
        guard
            case .incomplete = feed(
                Array("Content-Disposition: attachment; filename=\"caf".utf8) + [0xE9, 0x22, 13, 10])
        else {
            Issue.record("Latin-1 refused")
            return
        }
        guard case .complete(let head) = feed([13, 10]) else {
            Issue.record("the blank line did not complete the head")
            return
        }
        #expect(head.status == 206)
        #expect(head.value("content-range") == "bytes 0-1/2")
        #expect(head.value("X-Folded") == "a b")
        #expect(head.value("Content-Disposition") == "attachment; filename=\"caf\u{E9}\"")

        var fresh = HeadCollector()
        let malformed = Array("HTTP/1.1 OK\r\n".utf8).withUnsafeBytes { fresh.append($0) }
        guard case .malformed = malformed else {
            Issue.record("a status line without a code was accepted")
            return
        }
    }
}

/// A task executor with a thread of its own, so timing-sensitive tests do not wait for the shared pool.
final class DedicatedThreadExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked: `jobs` is only touched under `condition`.
    static let shared = DedicatedThreadExecutor()

    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []

    private init() {
        let thread = Thread { [self] in run() }
        thread.name = "DedicatedThreadExecutor"
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// A consumer that records what arrives, and can decline, fail or write slowly.
final class RecordingConsumer: ResponseConsumer, Sendable {
    struct State {
        var heads = 0
        var head: ResponseHead?
        var bytes = 0
        var largestChunk = 0
        var received: [UInt8] = []
    }

    let state = Mutex(State())
    let acceptsHead: Bool
    let failsAfter: Int?
    let delayPerChunk: Duration?
    let keepsBytes: Bool

    init(acceptsHead: Bool = true, failsAfter: Int? = nil, delayPerChunk: Duration? = nil, keepsBytes: Bool = false) {
        self.acceptsHead = acceptsHead
        self.failsAfter = failsAfter
        self.delayPerChunk = delayPerChunk
        self.keepsBytes = keepsBytes
    }

    func receive(_ head: ResponseHead) -> Bool {
        state.withLock { state in
            state.heads += 1
            state.head = head
        }
        return acceptsHead
    }

    func receive(_ body: UnsafeRawBufferPointer) throws(ResumableError) {
        let total = state.withLock { state in
            state.bytes += body.count
            state.largestChunk = max(state.largestChunk, body.count)
            if keepsBytes { state.received.append(contentsOf: body) }
            return state.bytes
        }
        if let failsAfter, total >= failsAfter {
            throw ResumableError(.diskFull, "the test's disk is full")
        }
        if let delayPerChunk {
            let (seconds, attoseconds) = delayPerChunk.components
            usleep(UInt32(seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
        }
    }
}

/// Serves one endless body as fast as the client takes it, counting the bytes the kernel accepted.
final class CountingServer: Sendable {
    let sent = Atomic<Int>(0)
    let url: URL

    init() throws {
        let (descriptor, port) = try StalledListener.listen()
        url = URL(string: "http://127.0.0.1:\(port)/endless")!
        let thread = Thread { [self] in
            let connection = accept(descriptor, nil, nil)
            close(descriptor)
            guard connection >= 0 else { return }
            defer { close(connection) }
            var request = [UInt8](repeating: 0, count: 4096)
            _ = read(connection, &request, request.count)
            let head = Array("HTTP/1.1 200 OK\r\nContent-Length: 100000000000\r\n\r\n".utf8)
            guard send(connection, head, head.count, Int32(MSG_NOSIGNAL)) == head.count else { return }
            let chunk = [UInt8](repeating: 0x5A, count: 65536)
            while true {
                let written = send(connection, chunk, chunk.count, Int32(MSG_NOSIGNAL))
                if written <= 0 { return }
                self.sent.add(written, ordering: .relaxed)
            }
        }
        thread.start()
    }
}

/// A loopback port where connecting is refused: bound, so that no other test (they run in parallel) can take it,
/// but not listening.
final class RefusingPort: Sendable {
    let port: UInt16
    private let descriptor: Int32

    init() throws {
        (descriptor, port) = try StalledListener.boundSocket(listening: false)
    }

    deinit {
        close(descriptor)
    }
}

/// A listening socket that never accepts: connections complete in the kernel's backlog, the request is
/// buffered, and no answer ever comes.
final class StalledListener: Sendable {
    let port: UInt16
    private let descriptor: Int32

    init() throws {
        (descriptor, port) = try Self.listen()
    }

    deinit {
        close(descriptor)
    }

    var url: URL { URL(string: "http://127.0.0.1:\(port)/stalled")! }

    /// A socket listening on a free loopback port, and the port.
    static func listen() throws -> (Int32, UInt16) {
        try boundSocket(listening: true)
    }

    /// A socket bound to a free loopback port, listening or not, and the port.
    static func boundSocket(listening: Bool) throws -> (Int32, UInt16) {
        #if canImport(Glibc)
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
            let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                bind(descriptor, generic, length) == 0 && (!listening || startListening(descriptor))
                    && getsockname(descriptor, generic, &length) == 0
            }
        }
        guard bound else {
            close(descriptor)
            throw POSIXError(.EADDRINUSE)
        }
        return (descriptor, UInt16(bigEndian: address.sin_port))
    }

    private static func startListening(_ descriptor: Int32) -> Bool {
        #if canImport(Glibc)
            Glibc.listen(descriptor, 16) == 0
        #else
            Darwin.listen(descriptor, 16) == 0
        #endif
    }

    /// A URL whose server accepts, reads the request, and closes without a byte of answer.
    static func closingAfterRequest() throws -> URL {
        let (descriptor, port) = try listen()
        let thread = Thread {
            let connection = accept(descriptor, nil, nil)
            var buffer = [UInt8](repeating: 0, count: 4096)
            _ = read(connection, &buffer, buffer.count)
            close(connection)
            close(descriptor)
        }
        thread.start()
        return URL(string: "http://127.0.0.1:\(port)/nothing")!
    }
}
