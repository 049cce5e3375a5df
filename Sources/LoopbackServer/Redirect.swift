/// A redirect answer used by ``Behavior/redirect``.
///
/// The server answers with `status`, a `Location` header carrying `location` verbatim, and a small HTML body.
public struct Redirect: Sendable, Hashable {
    /// The redirect status code: 301, 302, 303, 307 or 308 (any code is sent as given).
    public var status: Int
    /// The `Location` header value, sent exactly as given (absolute or relative).
    public var location: String

    /// Creates a redirect.
    ///
    /// - Parameters:
    ///   - status: The status code, 302 by default.
    ///   - location: The `Location` header value.
    public init(status: Int = 302, location: String) {
        self.status = status
        self.location = location
    }
}
