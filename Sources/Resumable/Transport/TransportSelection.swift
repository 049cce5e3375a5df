import Synchronization

extension DownloadTask.Transport {
    /// A session for the requests of one download task: the transport is resolved once, here, and its
    /// connections are kept for the task's later requests (see ``TransportSession``).
    ///
    /// - libcurl: a ``CurlConnectionCache`` of idle multi handles, and with them curl's connection caches, kept by
    ///   origin for the task's requests, so a request after one to the same origin that ended cleanly goes out on
    ///   the same kept-alive connection.
    /// - URLSession: one `URLSession` for the task, whose connection pool does the same.
    /// - custom: the custom transport itself, behind a session that only refuses requests once closed.
    ///
    /// Call ``TransportSession/close()`` when the task ends.
    ///
    /// - Throws: ``ResumableError/Code/invalidRequest`` when ``libcurl`` was asked for and cannot be loaded.
    func makeSession() throws(ResumableError) -> any TransportSession {
        let transport = try resolved()
        switch transport.kind {
        case .libcurl:
            let library = try CurlLibrary.load(transport.libraryName).get()
            return CurlTransport(library: library, connections: CurlConnectionCache(library: library))
        case .custom(let custom):
            return CustomTransportSession(transport: custom.transport)
        case .urlSession, .automatic:
            return URLSessionTransport()
        }
    }
}

/// A configured transport performs each request through a session of its own, made and closed around it: the
/// transport is resolved per request and no connection outlives its request. The engine uses
/// ``DownloadTask/Transport/makeSession()`` instead, once per task.
extension DownloadTask.Transport: HTTPTransport {
    func execute(_ request: TransportRequest, consumer: some ResponseConsumer) async throws(ResumableError) {
        let session = try makeSession()
        defer { session.close() }
        try await session.execute(request, consumer: consumer)
    }
}

/// A custom transport as a session: requests go straight through until ``close()``.
private final class CustomTransportSession: TransportSession {
    let transport: any HTTPTransport
    private let closed = Atomic<Bool>(false)

    init(transport: any HTTPTransport) {
        self.transport = transport
    }

    func execute(_ request: TransportRequest, consumer: some ResponseConsumer) async throws(ResumableError) {
        guard !closed.load(ordering: .acquiring) else { throw TransportSessionClosed.error }
        try await transport.execute(request, consumer: consumer)
    }

    func close() {
        closed.store(true, ordering: .releasing)
    }
}

/// The failure of a request made through a closed ``TransportSession``.
enum TransportSessionClosed {
    static let error = ResumableError(.cancelled, "the transport session was closed: its download task has ended")
}
