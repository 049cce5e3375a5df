#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A blocking TCP socket listening on 127.0.0.1, on a port of the system's choosing: for a test's own raw server,
/// one that answers bytes no ``LoopbackServer`` would write (a malformed head, a cut body, a hand-made coding).
public enum RawListeningSocket {
    /// Binds 127.0.0.1 on a free port and listens; the caller accepts on the descriptor (blocking) and closes it.
    public static func open() throws(LoopbackServerError) -> (descriptor: Int32, port: UInt16) {
        let listener = try Listener.open(host: "127.0.0.1", port: 0)
        let flags = fcntl(listener.descriptor, F_GETFL)
        _ = fcntl(listener.descriptor, F_SETFL, flags & ~O_NONBLOCK)
        return (listener.descriptor, listener.port)
    }
}
