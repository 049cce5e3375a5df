import Foundation

/// An in-process HTTP/1.1 server on 127.0.0.1 for tests, demos and static file serving.
///
/// It binds a random free port by default, serves registered ``Resource``s (bytes, generated content or files) and
/// optionally a directory, with correct `Range`, `If-Range`, `ETag` and `Last-Modified` semantics — and misbehaves
/// on request through ``Behavior`` and ``ScriptedResponse``. Every response carries `Connection: close` unless
/// ``Configuration/keepAlive`` is on; each connection is served on its own thread. ``shutdown()`` (also run on
/// deinit) stops everything and joins the threads.
public final class LoopbackServer: Sendable {
    /// The actual bound port.
    public let port: UInt16
    /// The host the server is bound to.
    public let host: String
    let core: ServerCore

    /// Binds, listens and starts accepting connections on a background thread.
    ///
    /// - Parameter configuration: Where to bind and server-wide transfer settings.
    /// - Throws: ``LoopbackServerError`` when the socket cannot be created, bound or put in listening state.
    public init(configuration: Configuration = .init()) throws {
        core = try ServerCore(configuration: configuration)
        port = core.listener.port
        host = configuration.host
        core.start()
    }

    deinit {
        core.shutdown()
    }

    /// The configuration the server was started with.
    public var configuration: Configuration { core.configuration }

    /// The server's base URL, `http://127.0.0.1:PORT` (IPv6 hosts are bracketed).
    public var baseURL: URL {
        let authority = host.contains(":") ? "[\(host)]" : host
        return URL(string: "http://\(authority):\(port)") ?? URL(fileURLWithPath: "/")
    }

    /// The URL for a path on this server.
    ///
    /// - Parameter path: A path such as `"/file.bin"` (a missing leading slash is added), optionally with a query.
    ///   Characters not allowed in a URL are percent-encoded.
    /// - Returns: The absolute URL.
    public func url(for path: String) -> URL {
        let normalized = path.hasPrefix("/") ? path : "/" + path
        let base = baseURL.absoluteString
        if let url = URL(string: base + normalized) { return url }
        var allowed = CharacterSet.urlPathAllowed
        allowed.insert(charactersIn: "?&=")
        let encoded = normalized.addingPercentEncoding(withAllowedCharacters: allowed) ?? normalized
        return URL(string: base + encoded) ?? baseURL
    }

    /// Stops accepting, closes the listening socket and every open connection, and joins all threads.
    ///
    /// Idempotent and safe to call from any thread; also called from deinit.
    public func shutdown() {
        core.shutdown()
    }
}
