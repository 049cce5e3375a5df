#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Thin wrappers over the socket system calls used by the server.
enum SocketIO {
    #if canImport(Glibc)
        static let noSignal = Int32(MSG_NOSIGNAL)
        static let streamType = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
    #else
        static let noSignal: Int32 = 0
        static let streamType = SOCK_STREAM
    #endif

    /// The current `errno` as text.
    static func errorDescription(_ code: Int32 = errno) -> String {
        guard let text = strerror(code) else { return "errno \(code)" }
        return "\(String(cString: text)) (errno \(code))"
    }

    /// Sends all of `buffer`; returns `false` when the peer is gone or the socket was shut down.
    static func sendAll(_ descriptor: Int32, _ buffer: UnsafeRawBufferPointer) -> Bool {
        guard var pointer = buffer.baseAddress else { return true }
        var remaining = buffer.count
        while remaining > 0 {
            let sent = send(descriptor, pointer, remaining, noSignal)
            if sent > 0 {
                pointer += sent
                remaining -= sent
            } else if sent < 0 && errno == EINTR {
                continue
            } else {
                return false
            }
        }
        return true
    }

    /// Sends all of `bytes`.
    static func sendAll(_ descriptor: Int32, _ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { sendAll(descriptor, $0) }
    }

    /// Sets an integer socket option, ignoring failure.
    static func setOption(_ descriptor: Int32, level: Int32, name: Int32, value: Int32) {
        var value = value
        _ = setsockopt(descriptor, level, name, &value, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Sets the receive timeout.
    static func setReceiveTimeout(_ descriptor: Int32, milliseconds: Int) {
        var time = timeval()
        time.tv_sec = .init(milliseconds / 1000)
        time.tv_usec = .init((milliseconds % 1000) * 1000)
        _ = setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Arms `SO_LINGER` with a zero timeout so that `close` sends a reset.
    static func armReset(_ descriptor: Int32) {
        var option = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(descriptor, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
    }

    /// Shuts down both directions, waking any thread blocked on the socket.
    static func shutdownBoth(_ descriptor: Int32) {
        #if canImport(Glibc)
            _ = shutdown(descriptor, Int32(SHUT_RDWR))
        #else
            _ = shutdown(descriptor, SHUT_RDWR)
        #endif
    }

    /// Shuts down the sending direction (sends FIN).
    static func shutdownWrite(_ descriptor: Int32) {
        #if canImport(Glibc)
            _ = shutdown(descriptor, Int32(SHUT_WR))
        #else
            _ = shutdown(descriptor, SHUT_WR)
        #endif
    }
}
