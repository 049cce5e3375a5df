import Foundation

/// One header field, name and value as sent or received.
struct HTTPHeader: Hashable, Sendable {
    var name: String
    var value: String
}

/// What the engine asks a transport to send: always a GET.
struct TransportRequest: Hashable, Sendable {
    var url: URL
    var headers: [HTTPHeader]
    /// How long the transfer may stall (no bytes in either direction) before it fails with a timeout.
    var idleTimeout: Duration
    /// How long establishing a connection may take.
    var connectTimeout: Duration = .seconds(30)
    /// How TLS connections are verified and authenticated.
    var tls: DownloadTask.TLS = .default
    /// Which proxy the request goes through.
    var proxy: DownloadTask.Proxy = .environment
}

/// The status line and headers of one response, as a transport received them.
struct ResponseHead: Sendable {
    var status: Int
    var headers: [HTTPHeader]

    /// The first value of the named header, compared case-insensitively.
    func value(_ name: String) -> String? {
        headers.first { Self.sameName($0.name, name) }?.value
    }

    /// Every value of the named header, in order.
    func values(_ name: String) -> [String] {
        headers.filter { Self.sameName($0.name, name) }.map(\.value)
    }

    /// Whether the body ends where its Content-Length says: a Content-Length and no Transfer-Encoding (which would
    /// take precedence, RFC 9112 §6.3).
    var isFramedByContentLength: Bool {
        value("Content-Length") != nil && value("Transfer-Encoding") == nil
    }

    /// Whether two field names are the same, ignoring ASCII case: field names are tokens (RFC 9110 §5.1), ASCII by
    /// definition. Not `caseInsensitiveCompare`, which bridges to `NSString` and folds Unicode case, at a cost that
    /// showed in a batch of small files: a head is looked up a dozen times per response.
    static func sameName(_ lhs: String, _ rhs: String) -> Bool {
        func lowered(_ byte: UInt8) -> UInt8 { (0x41...0x5A).contains(byte) ? byte | 0x20 : byte }
        return lhs.utf8.elementsEqual(rhs.utf8) { lowered($0) == lowered($1) }
    }
}

/// Receives a response as it arrives. Called on the transport's thread, one call at a time.
protocol ResponseConsumer: Sendable {
    /// The head arrived. Return `false` to stop the request without reading the body.
    func receive(_ head: ResponseHead) -> Bool
    /// A piece of the body arrived. Throw to abort the request; the error is what `execute` throws.
    func receive(_ body: UnsafeRawBufferPointer) throws(ResumableError)
}

/// Sends one HTTP request and streams the answer into a consumer, without following redirects.
///
/// The seam between the resume logic and the network: the engine decides what to send and whether an
/// answer may be joined; a transport only moves bytes. Redirects, retries and validation all live in the
/// engine, so every transport behaves the same.
protocol HTTPTransport: Sendable {
    /// Performs `request`, delivering the head and then the body to `consumer`.
    ///
    /// Returns when the body ended as the server framed it (or when the consumer declined the head).
    /// Throws a ``ResumableError`` (``ResumableError/Code/network``, ``ResumableError/Code/timedOut``,
    /// ``ResumableError/Code/incompleteBody``, ``ResumableError/Code/cancelled``, or whatever the consumer
    /// threw) when it did not. Cancelling the calling task cancels the request.
    func execute(_ request: TransportRequest, consumer: some ResponseConsumer) async throws(ResumableError)
}

/// The failure of a request whose connection ended cleanly without a final response: nothing, or only interim
/// (1xx) ones.
let noFinalResponse = ResumableError(.network, "the connection ended without a final response")

/// An ``HTTPTransport`` for the requests of one download task, made once per task by
/// ``DownloadTask/Transport/makeSession()``.
///
/// A session keeps what is worth keeping between the requests of a task: the transport, resolved once (an
/// ``DownloadTask/Transport/automatic`` choice is made when the session is), and its connections: one `URLSession`
/// for the URLSession transport, idle curl multi handles (each owning curl's connection and DNS caches) kept by
/// origin for libcurl (``CurlConnectionCache``). A retry, resume or redirect after a response that ended cleanly,
/// or a segment connection after another ended, can then reuse the kept-alive connection instead of opening a new
/// one. Several tasks share one ``SharedTransportSession`` instead (a queue's), which no task closes.
///
/// Requests through one session are normally sequential; overlapping ones work, each on a connection of its own.
/// ``close()`` ends the session when the task ends; a session also closes itself when it goes away.
protocol TransportSession: HTTPTransport {
    /// Releases the session's connections (and invalidates its `URLSession`). Idempotent. A request still running
    /// is cancelled; one started afterwards fails with ``ResumableError/Code/cancelled``.
    func close()
}
