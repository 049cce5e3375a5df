import Foundation

/// The URLs this library downloads from.
package enum HTTPURL {
    /// The origin of an http(s) URL: the lowercased scheme and host, and the port (the scheme's default when the URL
    /// has none). What decides whether two requests may share a connection, and a host's limit in a queue.
    static func originParts(of url: URL) -> (scheme: String, host: String, port: Int) {
        let scheme = url.scheme?.lowercased() ?? ""
        return (scheme, url.host?.lowercased() ?? "", url.port ?? (scheme == "https" ? 443 : 80))
    }

    /// The longest URL taken, in bytes of its text (a fragment included): 64 KiB, eight times the request line
    /// nginx accepts by default. A task record holds its URL three times (its own, the token's and the token's
    /// original one) and a token twice; with this limit both stay far below the 1 MiB their readers accept, so a
    /// URL that was taken is never one whose record or token could not be read back.
    package static let maximumLength = 64 * 1024

    /// Why a URL cannot be downloaded from.
    package enum Problem: Equatable, Sendable, CustomStringConvertible {
        /// Not an absolute http or https URL with a host.
        case notHTTP
        /// Longer than ``HTTPURL/maximumLength``: so many bytes.
        case tooLong(bytes: Int)

        package var description: String {
            switch self {
            case .notHTTP: "not an http or https URL"
            case .tooLong(let bytes): "a URL of \(bytes) bytes is longer than the \(HTTPURL.maximumLength) taken"
            }
        }
    }

    /// Why `url` cannot be downloaded from, or nil: it must be absolute http or https with a host, and at most
    /// ``maximumLength`` bytes long.
    package static func problem(with url: URL) -> Problem? {
        let length = url.absoluteString.utf8.count
        guard length <= maximumLength else { return .tooLong(bytes: length) }
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else { return .notHTTP }
        guard let host = url.host, !host.isEmpty else { return .notHTTP }
        return nil
    }

    /// Whether `url` is absolute http or https with a host, and at most ``maximumLength`` bytes long.
    package static func isSupported(_ url: URL) -> Bool {
        problem(with: url) == nil
    }

    /// `text` for an error message: whole when it is short, otherwise its first 200 characters, an ellipsis and its
    /// length. A URL from outside may be 64 KiB long, and a message repeats into records and logs.
    package static func excerpt(_ text: String) -> String {
        let limit = 200
        guard text.utf8.count > limit else { return text }
        return String(text.prefix(limit)) + "… (\(text.utf8.count) bytes)"
    }

    /// Scheme, host and port, for telling whether a redirect crosses origins.
    static func origin(of url: URL) -> String {
        let (scheme, host, port) = originParts(of: url)
        return "\(scheme)://\(host):\(port)"
    }
}
