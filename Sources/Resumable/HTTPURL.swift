import Foundation

/// The URLs this library downloads from.
package enum HTTPURL {
    /// The origin of an http(s) URL: the lowercased scheme and host, and the port (the scheme's default when the URL
    /// has none). What decides whether two requests may share a connection, and a host's limit in a queue.
    static func originParts(of url: URL) -> (scheme: String, host: String, port: Int) {
        let scheme = url.scheme?.lowercased() ?? ""
        return (scheme, url.host?.lowercased() ?? "", url.port ?? (scheme == "https" ? 443 : 80))
    }

    /// Whether `url` is absolute http or https with a host.
    package static func isSupported(_ url: URL) -> Bool {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else { return false }
        guard let host = url.host, !host.isEmpty else { return false }
        return true
    }

    /// Scheme, host and port, for telling whether a redirect crosses origins.
    static func origin(of url: URL) -> String {
        let (scheme, host, port) = originParts(of: url)
        return "\(scheme)://\(host):\(port)"
    }
}
