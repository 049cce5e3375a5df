/// Everything needed to write one response: head, body parts and transfer behavior.
struct ResponsePlan {
    /// A piece of a response body.
    enum BodyPart {
        /// Bytes sent as they are.
        case literal([UInt8])
        /// Content bytes from the resource.
        case content(Range<Int64>)
        /// Content bytes wrapped in stored deflate blocks; updates the running CRC for ``gzipTrailer(length:)``.
        case storedDeflate(Range<Int64>)
        /// The gzip trailer: CRC-32 of the preceding stored-deflate content and its length.
        case gzipTrailer(length: Int64)

        /// The number of bytes this part puts on the wire.
        var encodedLength: Int64 {
            switch self {
            case .literal(let bytes): Int64(bytes.count)
            case .content(let range): Int64(range.count)
            case .storedDeflate(let range):
                5 * GzipFraming.blockCount(for: Int64(range.count)) + Int64(range.count)
            case .gzipTrailer: 8
            }
        }
    }

    /// Informational responses written before the head.
    var interim: [InterimResponse] = []
    /// The status code.
    var status: Int
    /// A raw status line replacing `HTTP/1.1 <status> <reason>`.
    var rawStatusLine: String?
    /// The headers in order (`Connection: close` is appended when absent).
    var headers: [HeaderField]
    /// The body parts.
    var parts: [BodyPart] = []
    /// Whether the body is sent (false for HEAD and bodiless statuses).
    var includesBody = true
    /// Close the connection after this many body bytes.
    var dropAfterBytes: Int64?
    /// Reset instead of closing cleanly when dropping.
    var resetOnDrop = false
    /// Pace the body at this rate.
    var throttleBytesPerSecond: Int?
    /// Use chunked transfer coding.
    var chunked = false
    /// Hold the body at this gate's limit.
    var gate: BodyGate?
    /// Leave the connection open for the next request (no `Connection: close`); only when the body is framed
    /// exactly and sent whole (see ``LoopbackServer/Configuration/keepAlive``).
    var keepAlive = false

    /// The body length on the wire (before chunked framing).
    var bodyLength: Int64 {
        parts.reduce(0) { $0 + $1.encodedLength }
    }

    /// The serialized head, ending with the empty line.
    var headBytes: [UInt8] {
        var text = rawStatusLine ?? "HTTP/1.1 \(status) \(HTTPStatus.reasonPhrase(for: status))"
        text += "\r\n"
        for field in headers {
            text += "\(field.name): \(field.value)\r\n"
        }
        if !keepAlive && !headers.contains(named: "Connection") {
            text += "Connection: close\r\n"
        }
        text += "\r\n"
        return Array(text.utf8)
    }
}
