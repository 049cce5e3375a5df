extension LoopbackServer {
    /// Where the server binds and server-wide transfer settings.
    public struct Configuration: Sendable, Hashable {
        /// The address to bind: an IPv4 or IPv6 literal, or `localhost`; `127.0.0.1` by default.
        public var host: String
        /// The port to bind; 0 (the default) picks a random free port.
        public var port: UInt16
        /// Pace every response body at this many bytes per second unless a ``Behavior`` overrides it.
        ///
        /// The rate is per response, like nginx `limit_rate`: responses sent in parallel each get it.
        public var throttleBytesPerSecond: Int?
        /// Close each connection after sending this many body bytes unless a ``Behavior`` overrides it.
        public var dropAfterBytes: Int64?
        /// Keep connections open between requests (HTTP/1.1 persistent connections); `false` by default, when
        /// every response carries `Connection: close`.
        ///
        /// A connection stays open only after a response whose body was framed exactly and sent whole: never
        /// after a scripted response, a cut body (``Behavior/dropAfterBytes``), a ``Behavior/contentLengthOverride``,
        /// or a request with `Connection: close` or a body. ``RecordedRequest/connection`` tells which requests
        /// shared a connection.
        public var keepAlive: Bool
        /// The most requests served at once for each path whose resource sets no
        /// ``Resource/concurrencyLimit`` (static files and unknown paths included; each path is counted on its
        /// own); `nil` (the default) sets no limit. See ``ConcurrencyLimit``.
        public var concurrencyLimit: ConcurrencyLimit?
        /// Whether the server keeps what it was asked: every request (``LoopbackServer/requests``) and each path's
        /// concurrency counters (``LoopbackServer/peakConcurrentRequests(for:)``, overload answers). `true` (the
        /// default) for tests, which read them.
        ///
        /// `false` for a server that runs for as long as someone likes (`resumable serve`): then nothing is kept per
        /// request, so memory stays bounded by the connections open at once — ``LoopbackServer/requests`` stays
        /// empty, and a path's counters live only while a request for it is in flight (concurrency limits still
        /// apply). Package access: it is the CLI's setting, not part of the test API.
        package var recordsRequests = true

        /// Creates a configuration.
        ///
        /// - Parameters:
        ///   - host: The address to bind.
        ///   - port: The port, 0 for a random free one.
        ///   - throttleBytesPerSecond: Server-wide body pacing.
        ///   - dropAfterBytes: Server-wide body cut-off.
        ///   - keepAlive: Keep connections open between requests.
        ///   - concurrencyLimit: The most requests served at once per path, none by default.
        public init(
            host: String = "127.0.0.1",
            port: UInt16 = 0,
            throttleBytesPerSecond: Int? = nil,
            dropAfterBytes: Int64? = nil,
            keepAlive: Bool = false,
            concurrencyLimit: ConcurrencyLimit? = nil
        ) {
            self.host = host
            self.port = port
            self.throttleBytesPerSecond = throttleBytesPerSecond
            self.dropAfterBytes = dropAfterBytes
            self.keepAlive = keepAlive
            self.concurrencyLimit = concurrencyLimit
        }
    }
}
