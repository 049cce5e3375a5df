#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A bound, listening, non-blocking TCP socket.
struct Listener: Sendable {
    /// The listening descriptor.
    let descriptor: Int32
    /// The bound port.
    let port: UInt16

    /// Binds `host` (an IPv4 or IPv6 literal, or `localhost`) on `port` and listens.
    static func open(host: String, port: UInt16) throws(LoopbackServerError) -> Listener {
        let address = host == "localhost" ? "127.0.0.1" : host
        var ipv4 = sockaddr_in()
        var ipv6 = sockaddr_in6()
        let family: Int32
        if inet_pton(AF_INET, address, &ipv4.sin_addr) == 1 {
            family = AF_INET
        } else if inet_pton(AF_INET6, address, &ipv6.sin6_addr) == 1 {
            family = AF_INET6
        } else {
            throw LoopbackServerError("invalid host address '\(host)' (an IPv4 or IPv6 literal is required)")
        }
        let descriptor = socket(family, SocketIO.streamType, 0)
        guard descriptor >= 0 else {
            throw LoopbackServerError("socket() failed: \(SocketIO.errorDescription())")
        }
        SocketIO.setOption(descriptor, level: SOL_SOCKET, name: SO_REUSEADDR, value: 1)
        // A write to a connection or pipe whose reader is gone raises SIGPIPE, which ends the process: Darwin has no
        // MSG_NOSIGNAL (SocketIO.noSignal is 0 there), and on Linux the processes that run a loopback server (the
        // tests, `resumable serve` and `demo`) also write to pipes and to TLS connections (OpenSSL writes without
        // MSG_NOSIGNAL); a parallel test run was seen ended by one. Ignored process-wide; children started with
        // SpawnedProcess get the default back.
        signal(SIGPIPE, SIG_IGN)
        let bindResult: Int32
        if family == AF_INET {
            ipv4.sin_family = sa_family_t(AF_INET)
            ipv4.sin_port = port.bigEndian
            bindResult = withUnsafePointer(to: &ipv4) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        } else {
            ipv6.sin6_family = sa_family_t(AF_INET6)
            ipv6.sin6_port = port.bigEndian
            bindResult = withUnsafePointer(to: &ipv6) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in6>.size))
                }
            }
        }
        guard bindResult == 0 else {
            let message = SocketIO.errorDescription()
            close(descriptor)
            throw LoopbackServerError("bind(\(host):\(port)) failed: \(message)")
        }
        guard listen(descriptor, 128) == 0 else {
            let message = SocketIO.errorDescription()
            close(descriptor)
            throw LoopbackServerError("listen() failed: \(message)")
        }
        let flags = fcntl(descriptor, F_GETFL)
        _ = fcntl(descriptor, F_SETFL, flags | O_NONBLOCK)
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let nameResult = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard nameResult == 0 else {
            let message = SocketIO.errorDescription()
            close(descriptor)
            throw LoopbackServerError("getsockname() failed: \(message)")
        }
        let boundPort: UInt16 = withUnsafePointer(to: &storage) {
            if family == AF_INET {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
            } else {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
            }
        }
        return Listener(descriptor: descriptor, port: boundPort)
    }
}
