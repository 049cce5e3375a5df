/// A cap on how many requests for one path the server serves at once, like nginx `limit_conn`: requests beyond
/// it are turned away with a small error page (`503 Service Unavailable` by default) instead of being served.
///
/// Set it on a resource (``Resource/concurrencyLimit``) or for every path (``LoopbackServer/Configuration/concurrencyLimit``).
/// A request counts as in flight for its path from the moment its head is read until the last byte of its
/// response body has been written (or the response failed) — before the server closes that connection or reads
/// the next request on it. Every request to the path counts, whatever answers it (one-shot behaviors and scripted
/// responses included); a turned-away request does not count, consumes no queued one-shot response or behavior,
/// and is recorded with ``RecordedRequest/wasOverloaded`` set.
///
/// The check and the count are one atomic step, so a test can be exact: hold `maximum` responses at a
/// ``BodyGate`` and the next request is turned away, every time.
///
/// ```swift
/// var resource = Resource.generated(length: 1 << 20, seed: 1)
/// resource.concurrencyLimit = ConcurrencyLimit(maximum: 2, retryAfter: "0")
/// server.register(resource, at: "/file.bin")
/// // … a download with four connections …
/// #expect(server.peakConcurrentRequests(for: "/file.bin") <= 2)
/// #expect(server.overloadAnswers(for: "/file.bin") > 0)
/// ```
public struct ConcurrencyLimit: Sendable, Hashable {
    /// The most requests served at once for the path; values below 0 are treated as 0 (every request is turned
    /// away).
    public var maximum: Int
    /// The status answered to a request beyond the limit: 503 by default, 429 is the other usual choice.
    public var status: Int
    /// The `Retry-After` value sent with that answer (e.g. `"1"` or an HTTP date); `nil` sends none.
    public var retryAfter: String?

    /// Creates a limit.
    ///
    /// - Parameters:
    ///   - maximum: The most requests served at once for the path.
    ///   - status: The status for requests beyond it, 503 by default.
    ///   - retryAfter: A `Retry-After` value for that answer; none by default.
    public init(maximum: Int, status: Int = 503, retryAfter: String? = nil) {
        self.maximum = maximum
        self.status = status
        self.retryAfter = retryAfter
    }
}
