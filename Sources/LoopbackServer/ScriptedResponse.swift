/// A raw response sent exactly as given, for one request (see ``LoopbackServer/enqueue(_:for:)``).
///
/// The status line, headers and body are written verbatim; the server adds nothing except
/// `Connection: close` when no `Connection` header is present, and always closes the connection afterwards.
/// The body is sent even for `HEAD` requests.
public struct ScriptedResponse: Sendable, Hashable {
    /// The status line without line terminator, e.g. `"HTTP/1.1 206 Partial Content"`.
    public var statusLine: String
    /// The headers, sent exactly and in order.
    public var headers: [HeaderField]
    /// The body bytes.
    public var body: [UInt8]
    /// Close the connection after this many body bytes (`nil` sends the whole body).
    public var closeAfterBodyBytes: Int?
    /// Reset the connection (`SO_LINGER` 0) instead of closing it cleanly when ``closeAfterBodyBytes`` cuts the body.
    public var resetOnClose: Bool

    /// Creates a scripted response from a raw status line.
    ///
    /// - Parameters:
    ///   - statusLine: The status line, e.g. `"HTTP/1.1 200 OK"`.
    ///   - headers: The headers, sent exactly and in order.
    ///   - body: The body bytes.
    ///   - closeAfterBodyBytes: Close after this many body bytes.
    ///   - resetOnClose: Reset instead of a clean close when the body is cut.
    public init(
        statusLine: String,
        headers: [HeaderField] = [],
        body: [UInt8] = [],
        closeAfterBodyBytes: Int? = nil,
        resetOnClose: Bool = false
    ) {
        self.statusLine = statusLine
        self.headers = headers
        self.body = body
        self.closeAfterBodyBytes = closeAfterBodyBytes
        self.resetOnClose = resetOnClose
    }

    /// Creates a scripted response with the status line `HTTP/1.1 <status> <reason phrase>`.
    ///
    /// - Parameters:
    ///   - status: The status code; the standard reason phrase is used.
    ///   - headers: The headers, sent exactly and in order.
    ///   - body: The body bytes.
    ///   - closeAfterBodyBytes: Close after this many body bytes.
    ///   - resetOnClose: Reset instead of a clean close when the body is cut.
    public init(
        status: Int,
        headers: [HeaderField] = [],
        body: [UInt8] = [],
        closeAfterBodyBytes: Int? = nil,
        resetOnClose: Bool = false
    ) {
        self.init(
            statusLine: "HTTP/1.1 \(status) \(HTTPStatus.reasonPhrase(for: status))",
            headers: headers,
            body: body,
            closeAfterBodyBytes: closeAfterBodyBytes,
            resetOnClose: resetOnClose
        )
    }

    /// Creates a scripted response whose body is UTF-8 text.
    ///
    /// - Parameters:
    ///   - status: The status code; the standard reason phrase is used.
    ///   - headers: The headers, sent exactly and in order.
    ///   - text: The body text, encoded as UTF-8.
    ///   - closeAfterBodyBytes: Close after this many body bytes.
    public init(status: Int, headers: [HeaderField] = [], text: String, closeAfterBodyBytes: Int? = nil) {
        self.init(status: status, headers: headers, body: Array(text.utf8), closeAfterBodyBytes: closeAfterBodyBytes)
    }
}
