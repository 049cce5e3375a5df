/// How the server (mis)behaves when serving a ``Resource``.
///
/// The default value, ``normal``, is a correct RFC 9110 server. Each property switches on one deviation; they can
/// be combined. A behavior comes from the resource itself or from a one-shot
/// ``LoopbackServer/enqueue(behavior:for:)`` — or ``LoopbackServer/enqueue(behavior:for:whenRangeStartsAt:)``,
/// which picks out the one request for a given segment among requests arriving in parallel.
public struct Behavior: Sendable, Hashable {
    /// Always answer 200 with the whole body, ignoring `Range`.
    public var ignoreRange: Bool
    /// Honour `Range` even when `If-Range` does not match.
    public var ignoreIfRange: Bool
    /// A CDN quirk: answer 200 with the whole body to any `If-Range` holding an entity tag, even a matching one,
    /// while date `If-Range`s and bare `Range`s are honoured.
    public var ifRangeHonorsDatesOnly: Bool
    /// Close the connection after this many body bytes (the full `Content-Length` is still announced).
    ///
    /// For chunked responses the count is of payload bytes, and the last chunk is never sent.
    public var dropAfterBytes: Int64?
    /// When dropping, set `SO_LINGER` to 0 so the peer sees a reset (`ECONNRESET`) instead of a clean FIN.
    public var resetOnDrop: Bool
    /// A "206 at the wrong offset": the served range starts at the requested first byte plus this shift.
    ///
    /// The body really starts at the shifted position (clamped to the representation), the last byte stays the
    /// requested one (but never before the shifted first), and `Content-Range` honestly describes what is sent.
    public var rangeStartShift: Int64
    /// A short 206: serve at most this many bytes of a range, with an honest `Content-Range`.
    ///
    /// Values below 1 are treated as 1.
    public var maxPartialLength: Int64?
    /// When the request's `Accept-Encoding` allows gzip, answer 200 with `Content-Encoding: gzip` and the whole
    /// body gzip-compressed (stored deflate blocks), ignoring `Range`.
    public var gzipWhenAccepted: Bool
    /// Answer this status code with a small HTML body instead of the content.
    public var status: Int?
    /// A `Retry-After` header value to add to the response.
    public var retryAfter: String?
    /// Answer with this redirect instead of the content.
    public var redirect: Redirect?
    /// Pace the body at this many bytes per second (overrides the server-wide setting).
    ///
    /// The rate is per response, like nginx `limit_rate`: responses sent in parallel each get it, and the
    /// schedule starts with the first body bytes and time held at a ``gate`` does not count (no burst follows a
    /// hold).
    public var throttleBytesPerSecond: Int?
    /// Use `Transfer-Encoding: chunked` instead of `Content-Length`.
    public var chunked: Bool
    /// Answer a range request with a `206 multipart/byteranges` (one part per satisfiable range).
    public var multipartRanges: Bool
    /// Send 416 without a `Content-Range` header.
    public var omitContentRangeOn416: Bool
    /// Send this exact `Content-Length` value instead of the computed one (the body is unchanged).
    public var contentLengthOverride: String?
    /// Send this exact `Content-Range` value on a 206 instead of the computed one (the body is unchanged).
    public var extraContentRange: String?
    /// Informational responses (such as `103 Early Hints`) sent, in order, before the final response's head.
    public var interimResponses: [InterimResponse]
    /// Hold the body after ``BodyGate/limit`` bytes until the test moves or opens the gate (see ``BodyGate``).
    public var gate: BodyGate?

    /// A correct server: no deviation at all.
    public static let normal = Behavior()

    /// Creates a behavior; every parameter defaults to the correct-server value.
    ///
    /// - Parameters:
    ///   - ignoreRange: Always answer 200 with the whole body.
    ///   - ignoreIfRange: Honour `Range` even when `If-Range` does not match.
    ///   - ifRangeHonorsDatesOnly: Answer 200 to every entity-tag `If-Range`.
    ///   - dropAfterBytes: Close the connection after this many body bytes.
    ///   - resetOnDrop: Reset instead of a clean close when dropping.
    ///   - rangeStartShift: Shift the first byte of a 206.
    ///   - maxPartialLength: Serve at most this many bytes per range.
    ///   - gzipWhenAccepted: Gzip the whole body when the client accepts gzip.
    ///   - status: Answer this status with an HTML body.
    ///   - retryAfter: A `Retry-After` value to add.
    ///   - redirect: Answer with this redirect.
    ///   - throttleBytesPerSecond: Pace the body.
    ///   - chunked: Use chunked transfer coding.
    ///   - multipartRanges: Answer ranges as `multipart/byteranges`.
    ///   - omitContentRangeOn416: Leave `Content-Range` out of a 416.
    ///   - contentLengthOverride: Send this exact `Content-Length`.
    ///   - extraContentRange: Send this exact `Content-Range` on a 206.
    ///   - interimResponses: Send these 1xx responses before the final one.
    ///   - gate: Hold the body at this gate's limit.
    public init(
        ignoreRange: Bool = false,
        ignoreIfRange: Bool = false,
        ifRangeHonorsDatesOnly: Bool = false,
        dropAfterBytes: Int64? = nil,
        resetOnDrop: Bool = false,
        rangeStartShift: Int64 = 0,
        maxPartialLength: Int64? = nil,
        gzipWhenAccepted: Bool = false,
        status: Int? = nil,
        retryAfter: String? = nil,
        redirect: Redirect? = nil,
        throttleBytesPerSecond: Int? = nil,
        chunked: Bool = false,
        multipartRanges: Bool = false,
        omitContentRangeOn416: Bool = false,
        contentLengthOverride: String? = nil,
        extraContentRange: String? = nil,
        interimResponses: [InterimResponse] = [],
        gate: BodyGate? = nil
    ) {
        self.ignoreRange = ignoreRange
        self.ignoreIfRange = ignoreIfRange
        self.ifRangeHonorsDatesOnly = ifRangeHonorsDatesOnly
        self.dropAfterBytes = dropAfterBytes
        self.resetOnDrop = resetOnDrop
        self.rangeStartShift = rangeStartShift
        self.maxPartialLength = maxPartialLength
        self.gzipWhenAccepted = gzipWhenAccepted
        self.status = status
        self.retryAfter = retryAfter
        self.redirect = redirect
        self.throttleBytesPerSecond = throttleBytesPerSecond
        self.chunked = chunked
        self.multipartRanges = multipartRanges
        self.omitContentRangeOn416 = omitContentRangeOn416
        self.contentLengthOverride = contentLengthOverride
        self.extraContentRange = extraContentRange
        self.interimResponses = interimResponses
        self.gate = gate
    }
}
