/// An error raised by ``LoopbackServer`` when it cannot start (socket, bind or listen failure).
///
/// The message names the failing system call and, when available, the `errno` description.
public struct LoopbackServerError: Error, Sendable, CustomStringConvertible {
    /// A human-readable description of what failed.
    public let message: String

    /// Creates an error with a message.
    ///
    /// - Parameter message: A human-readable description of what failed.
    public init(_ message: String) {
        self.message = message
    }

    /// The error message.
    public var description: String { message }
}
