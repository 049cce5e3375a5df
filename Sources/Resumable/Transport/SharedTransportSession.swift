import Synchronization

/// A transport session that several download tasks share, so that their requests to the same origin reuse each
/// other's kept-alive connections: 1,000 small files from one host pay for one handshake, not 1,000.
///
/// Its owner (a download queue) makes it once with ``makeShared(_:idleLimit:)``, hands it to each task through
/// ``DownloadTask/Configuration`` (`sharedSession`), and closes it when it is done with it. A task never closes it:
/// the engine sends its requests through a ``lease()``, whose ``TransportSession/close()`` ends only the lease.
///
/// - libcurl: one ``CurlConnectionCache`` for every task: idle multi handles (and with them their connections) are
///   kept by origin, proxy and TLS configuration, up to ``idleLimit`` in all, and a request takes the most recently
///   used one of its origin.
/// - URLSession: a pool of `URLSession`s (``URLSessionPool``), each carrying one request at a time, kept by origin in
///   the same way. One `URLSession` for all tasks would reuse connections as well, but its one serial delegate queue
///   would carry every task's writes, and its flow control (``URLSessionDeliveryQueue``) would stop every task's
///   reading whenever one task's writer fell behind.
/// - custom: the custom transport, behind a session that refuses requests once closed.
///
/// ``close()`` cancels the requests still running (each fails with ``ResumableError/Code/cancelled``) and closes the
/// idle connections; a request made afterwards, through the session or any lease of it, fails with
/// ``ResumableError/Code/cancelled`` before anything is sent.
final class SharedTransportSession: TransportSession {
    /// The transport the session uses: ``DownloadTask/Transport/automatic`` resolved to what it chose. A task that
    /// uses the session should report this one.
    let transport: DownloadTask.Transport
    /// The most idle connections (multi handles, `URLSession`s) kept over all origins.
    let idleLimit: Int
    private let session: any TransportSession
    private let closed = Atomic<Bool>(false)

    /// The most idle connections a shared session keeps by default.
    static let defaultIdleLimit = CurlConnectionCache.defaultIdleLimit

    /// The failure of a request through a closed shared session, or through a lease of one.
    static let closedError = ResumableError(
        .cancelled, "the shared transport session was closed: the downloads sharing it have ended")

    private init(transport: DownloadTask.Transport, idleLimit: Int, session: any TransportSession) {
        self.transport = transport
        self.idleLimit = idleLimit
        self.session = session
    }

    /// A session for the tasks of one owner, on `transport` (resolved here, once).
    ///
    /// - Parameter idleLimit: The most idle connections kept over all origins (at least 0); beyond it the least
    ///   recently used is closed.
    /// - Throws: ``ResumableError/Code/invalidRequest`` when ``DownloadTask/Transport/libcurl`` was asked for and
    ///   cannot be loaded.
    static func makeShared(
        _ transport: DownloadTask.Transport, idleLimit: Int = defaultIdleLimit
    ) throws(ResumableError) -> SharedTransportSession {
        let resolved = try transport.resolved()
        let limit = max(idleLimit, 0)
        let session: any TransportSession
        switch resolved.kind {
        case .libcurl:
            let library = try CurlLibrary.load(resolved.libraryName).get()
            session = CurlTransport(
                library: library, connections: CurlConnectionCache(library: library, idleLimit: limit))
        case .urlSession, .automatic:
            session = URLSessionPool(idleLimit: limit)
        case .custom:
            session = try resolved.makeSession()
        }
        return SharedTransportSession(transport: resolved, idleLimit: limit, session: session)
    }

    /// Whether ``close()`` was called.
    var isClosed: Bool { closed.load(ordering: .acquiring) }

    func execute(_ request: TransportRequest, consumer: some ResponseConsumer) async throws(ResumableError) {
        guard !isClosed else { throw Self.closedError }
        do throws(ResumableError) {
            try await session.execute(request, consumer: consumer)
        } catch {
            // A request the closing cancelled, or one the closed session refused, says why.
            if error.code == .cancelled, isClosed, !Task.isCancelled { throw Self.closedError }
            throw error
        }
    }

    /// Cancels the requests still running, closes the idle connections, and refuses every later request. Idempotent;
    /// only the session's owner calls it.
    func close() {
        closed.store(true, ordering: .releasing)
        session.close()
    }

    /// A session for one task's requests, which go through this shared session; closing it (as the engine does when
    /// the task ends) ends the lease and leaves the shared session and its connections open.
    func lease() -> any TransportSession {
        Lease(shared: self)
    }

    /// One task's use of a shared session.
    private final class Lease: TransportSession {
        let shared: SharedTransportSession
        private let ended = Atomic<Bool>(false)

        init(shared: SharedTransportSession) {
            self.shared = shared
        }

        func execute(_ request: TransportRequest, consumer: some ResponseConsumer) async throws(ResumableError) {
            guard !ended.load(ordering: .acquiring) else { throw TransportSessionClosed.error }
            try await shared.execute(request, consumer: consumer)
        }

        func close() {
            ended.store(true, ordering: .releasing)
        }
    }
}

/// The URLSession transport for a shared session: `URLSession`s kept by origin, each carrying one request at a time.
///
/// A request takes the most recently used idle `URLSession` (a ``URLSessionTransport``) of its origin, or makes one,
/// and gives it back when it ends; its connection pool keeps the connection for the next request to that origin. Each
/// request so has a delegate queue of its own, and with it flow control of its own (``URLSessionDeliveryQueue``): a
/// slow writer holds back only its own download. At most `idleLimit` idle sessions are kept; one more invalidates
/// the least recently used.
final class URLSessionPool: TransportSession {
    /// What makes a `URLSession`'s kept connections usable for a request: the origin, the proxy and the TLS
    /// configuration it asked for.
    struct Origin: Hashable, Sendable {
        var scheme: String
        var host: String
        var port: Int
        var proxy: DownloadTask.Proxy
        var tls: DownloadTask.TLS

        init(_ request: TransportRequest) {
            (scheme, host, port) = HTTPURL.originParts(of: request.url)
            proxy = request.proxy
            tls = request.tls
        }
    }

    private struct State {
        /// The idle sessions, least recently given back first.
        var idle: [(origin: Origin, transport: URLSessionTransport)] = []
        /// The sessions carrying a request, for ``close()`` to cancel.
        var running: [ObjectIdentifier: URLSessionTransport] = [:]
        var closed = false
    }

    let idleLimit: Int
    private let flowControl: URLSessionFlowControl
    private let state = Mutex(State())

    init(idleLimit: Int = SharedTransportSession.defaultIdleLimit, flowControl: URLSessionFlowControl = .default) {
        self.idleLimit = max(idleLimit, 0)
        self.flowControl = flowControl
    }

    deinit {
        close()
    }

    /// How many sessions are idle now, for tests.
    var idleCount: Int { state.withLock { $0.idle.count } }

    func execute(_ request: TransportRequest, consumer: some ResponseConsumer) async throws(ResumableError) {
        let origin = Origin(request)
        let taken: URLSessionTransport? = state.withLock { state in
            guard !state.closed else { return nil }
            let transport: URLSessionTransport
            if let index = state.idle.lastIndex(where: { $0.origin == origin }) {
                transport = state.idle.remove(at: index).transport
            } else {
                transport = URLSessionTransport(flowControl: flowControl)
            }
            state.running[ObjectIdentifier(transport)] = transport
            return transport
        }
        guard let transport = taken else { throw TransportSessionClosed.error }
        defer { giveBack(transport, origin: origin) }
        // A `close()` from here on closes `transport` too: the request fails with a cancellation, never traps.
        try await transport.execute(request, consumer: consumer)
    }

    private func giveBack(_ transport: URLSessionTransport, origin: Origin) {
        let closing = state.withLock { state -> [URLSessionTransport] in
            state.running[ObjectIdentifier(transport)] = nil
            guard !state.closed, idleLimit > 0 else { return [transport] }
            state.idle.append((origin, transport))
            let excess = state.idle.count - idleLimit
            guard excess > 0 else { return [] }
            defer { state.idle.removeFirst(excess) }
            return state.idle.prefix(excess).map(\.transport)
        }
        for transport in closing { transport.close() }
    }

    /// Invalidates every session, cancelling the requests still running; later requests fail. Idempotent.
    func close() {
        let all = state.withLock { state in
            state.closed = true
            defer {
                state.idle = []
                state.running = [:]
            }
            return state.idle.map(\.transport) + Array(state.running.values)
        }
        for transport in all { transport.close() }
    }
}
