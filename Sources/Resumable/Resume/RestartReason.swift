/// Why a download dropped the bytes on disk and started again from byte 0.
enum RestartReason: Hashable, Sendable, CustomStringConvertible {
    /// The server sent the whole representation (200): it ignored the range, or `If-Range` failed.
    case wholeRepresentation
    /// The validators changed: the file on the server is not the one on disk.
    case representationChanged
    /// A 206 started elsewhere than the offset, or its `Content-Range` was unusable.
    case unjoinablePartial(String)
    /// A 416 said the file is not the size on disk, or said nothing usable.
    case unsatisfiableRange(String)
    /// Nothing proves the server's bytes are the ones on disk (no validators to check).
    case noValidators

    var description: String {
        switch self {
        case .wholeRepresentation: return "the server sent the whole file instead of the requested range"
        case .representationChanged: return "the file changed on the server"
        case .unjoinablePartial(let why): return "the partial answer cannot be joined: \(why)"
        case .unsatisfiableRange(let why): return "the server refused the range: \(why)"
        case .noValidators:
            return
                "the server gives no strong validator (a strong ETag, or a Last-Modified older than its Date) to join safely"
        }
    }
}
