/// A request received by ``LoopbackServer``, recorded before it is answered.
///
/// Only requests whose head could be parsed are recorded; malformed requests are answered with
/// `400 Bad Request` and are not recorded.
public struct RecordedRequest: Sendable {
    /// The request method as sent, e.g. `"GET"`.
    public let method: String
    /// The request-target as sent, e.g. `"/a.bin?x=1"`.
    public let target: String
    /// The path part of the target, without the query (still percent-encoded, as sent).
    public let path: String
    /// The query part of the target without the `?`, or `nil` when there is none.
    public let query: String?
    /// The HTTP version from the request line, e.g. `"HTTP/1.1"`.
    public let version: String
    /// The request headers in the order received.
    public let headers: [HeaderField]
    /// Which connection the request came on: the server numbers the connections it accepts 1, 2, 3, … in
    /// order, so requests with the same number shared one connection (see
    /// ``LoopbackServer/Configuration/keepAlive``); 0 when made by hand without one.
    public internal(set) var connection: Int
    /// Whether the request was turned away by a ``ConcurrencyLimit`` (answered with its status instead of being
    /// served); `false` for requests made by hand.
    public internal(set) var wasOverloaded: Bool = false

    /// Creates a recorded request.
    ///
    /// - Parameters:
    ///   - method: The request method.
    ///   - target: The request-target as sent.
    ///   - path: The path without the query.
    ///   - query: The query without the `?`, if any.
    ///   - version: The HTTP version string.
    ///   - headers: The headers in order.
    ///   - connection: The number of the connection it came on.
    public init(
        method: String,
        target: String,
        path: String,
        query: String? = nil,
        version: String = "HTTP/1.1",
        headers: [HeaderField],
        connection: Int = 0
    ) {
        self.method = method
        self.target = target
        self.path = path
        self.query = query
        self.version = version
        self.headers = headers
        self.connection = connection
    }

    /// The first value of the header called `name`, compared case-insensitively.
    ///
    /// - Parameter name: The header name.
    /// - Returns: The first matching value, or `nil` when the header is absent.
    public func header(_ name: String) -> String? {
        headers.firstValue(named: name)
    }

    /// The `Range` header, e.g. `"bytes=0-1048575"`; `nil` when absent.
    public var range: String? { header("Range") }

    /// The `If-Range` header, e.g. an entity tag `"\"v1\""` or an HTTP date; `nil` when absent.
    public var ifRange: String? { header("If-Range") }

    /// The byte positions of the request's `Range` when it asks for exactly one `first-last` range, e.g.
    /// `0...1048575` for `bytes=0-1048575`; `nil` for no `Range`, an open (`first-`) or suffix range, several
    /// ranges or an invalid header. This is the form a segment request takes.
    public var closedByteRange: ClosedRange<Int64>? {
        guard let value = range, let specs = ByteRangeSpec.parse(value), specs.count == 1,
            case .closed(let first, let last) = specs[0]
        else { return nil }
        return first...last
    }

    /// The first byte of the request's `Range` when it asks for exactly one `first-last` or `first-` range (the
    /// key of ``LoopbackServer/enqueue(behavior:for:whenRangeStartsAt:)``); `nil` otherwise.
    public var rangeStart: Int64? {
        ByteRangeSpec.singleStart(of: range)
    }

    /// All values of the header called `name`, compared case-insensitively, in order.
    ///
    /// - Parameter name: The header name.
    /// - Returns: Every matching value (possibly empty).
    public func headerValues(_ name: String) -> [String] {
        let lowered = name.lowercased()
        return headers.filter { $0.name.lowercased() == lowered }.map(\.value)
    }
}
