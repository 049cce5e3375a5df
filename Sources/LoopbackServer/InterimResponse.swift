/// An informational (1xx) response the server sends before the final one, such as `103 Early Hints`.
///
/// Set on a resource through ``Behavior/interimResponses``: each is written as a status line, its headers and the
/// empty line, with no body, before the final response's head. The status is sent as given; a value outside
/// 100...199 turns the interim response into a bogus final one, which is how a test can send garbage on purpose.
public struct InterimResponse: Sendable, Hashable {
    /// The status code, e.g. 103.
    public var status: Int
    /// The headers, sent exactly and in order.
    public var headers: [HeaderField]

    /// Creates an interim response.
    ///
    /// - Parameters:
    ///   - status: The status code; the standard reason phrase is used.
    ///   - headers: The headers, sent exactly and in order.
    public init(status: Int, headers: [HeaderField] = []) {
        self.status = status
        self.headers = headers
    }

    /// `100 Continue`, with no headers.
    public static let `continue` = InterimResponse(status: 100)

    /// `103 Early Hints` with one `Link` header, e.g. `</style.css>; rel=preload; as=style`.
    ///
    /// - Parameter link: The `Link` header value.
    /// - Returns: The interim response.
    public static func earlyHints(link: String) -> InterimResponse {
        InterimResponse(status: 103, headers: [HeaderField("Link", link)])
    }

    /// The bytes on the wire: status line, headers and the empty line.
    var bytes: [UInt8] {
        var text = "HTTP/1.1 \(status) \(HTTPStatus.reasonPhrase(for: status))\r\n"
        for field in headers {
            text += "\(field.name): \(field.value)\r\n"
        }
        text += "\r\n"
        return Array(text.utf8)
    }
}
