import Foundation
import LoopbackServer

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A response as read off the wire by ``RawHTTPClient``.
struct RawResponse {
    /// The status line.
    var statusLine: String
    /// The headers in order.
    var headers: [HeaderField]
    /// The body bytes as received (chunked framing included).
    var body: [UInt8]
    /// Whether the connection ended with a reset.
    var wasReset: Bool

    /// The status code, or 0 when the status line is malformed.
    var status: Int {
        let parts = statusLine.split(separator: " ")
        return parts.count >= 2 ? Int(parts[1]) ?? 0 : 0
    }

    /// The first value of a header (case-insensitive).
    func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// All header names, lowercased.
    var headerNames: [String] { headers.map { $0.name.lowercased() } }

    /// The body as UTF-8 text.
    var text: String { String(decoding: body, as: UTF8.self) }

    /// The body with chunked framing removed, and whether the last chunk was present.
    func dechunked() -> (body: [UInt8], complete: Bool) {
        var output: [UInt8] = []
        var index = 0
        while true {
            guard let lineEnd = findCRLF(from: index) else { return (output, false) }
            let sizeText = String(decoding: body[index..<lineEnd], as: UTF8.self)
            guard let size = Int(sizeText.split(separator: ";").first ?? "", radix: 16) else { return (output, false) }
            index = lineEnd + 2
            if size == 0 { return (output, true) }
            guard index + size + 2 <= body.count else {
                output += body[index..<min(body.count, index + size)]
                return (output, false)
            }
            output += body[index..<index + size]
            index += size + 2
        }
    }

    private func findCRLF(from start: Int) -> Int? {
        var index = start
        while index + 1 < body.count {
            if body[index] == 0x0D && body[index + 1] == 0x0A { return index }
            index += 1
        }
        return nil
    }
}

/// A deliberately tiny HTTP client on raw sockets: sends a request string, reads until the server closes.
enum RawHTTPClient {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Connects to 127.0.0.1:`port`; reads give up after `receiveTimeoutSeconds` without data.
    static func connect(port: UInt16, receiveTimeoutSeconds: Int = 15) throws -> Int32 {
        #if canImport(Glibc)
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
            let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { throw Failure(description: "socket failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            close(descriptor)
            throw Failure(description: "connect failed: errno \(errno)")
        }
        var timeout = timeval(tv_sec: receiveTimeoutSeconds, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return descriptor
    }

    /// Sends raw bytes.
    static func send(_ descriptor: Int32, _ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes {
                Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            guard sent > 0 else { throw Failure(description: "send failed: errno \(errno)") }
            offset += sent
        }
    }

    /// Sends `raw` and reads the whole response until the server closes the connection.
    static func exchange(port: UInt16, raw: String) throws -> RawResponse {
        try exchange(port: port, bytes: Array(raw.utf8))
    }

    /// Sends `bytes` and reads the whole response until the server closes the connection.
    static func exchange(port: UInt16, bytes: [UInt8], receiveTimeoutSeconds: Int = 15) throws -> RawResponse {
        let descriptor = try connect(port: port, receiveTimeoutSeconds: receiveTimeoutSeconds)
        defer { close(descriptor) }
        try send(descriptor, bytes)
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        var wasReset = false
        while true {
            let received = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if received > 0 {
                data += buffer[0..<received]
            } else if received == 0 {
                break
            } else if errno == EINTR {
                continue
            } else {
                if errno == ECONNRESET { wasReset = true } else { throw Failure(description: "recv errno \(errno)") }
                break
            }
        }
        return try split(data, wasReset: wasReset)
    }

    /// Sends a request and reads only the head, then closes (for huge bodies).
    static func headOnly(port: UInt16, raw: String) throws -> RawResponse {
        let descriptor = try connect(port: port)
        defer { close(descriptor) }
        try send(descriptor, Array(raw.utf8))
        var data: [UInt8] = []
        var byte: UInt8 = 0
        while !(data.count >= 4 && Array(data.suffix(4)) == [0x0D, 0x0A, 0x0D, 0x0A]) {
            guard recv(descriptor, &byte, 1, 0) == 1 else { break }
            data.append(byte)
        }
        return try split(data, wasReset: false)
    }

    /// Builds and sends a request with the given method, path and headers.
    static func request(
        port: UInt16,
        method: String = "GET",
        path: String,
        headers: [(String, String)] = [],
        receiveTimeoutSeconds: Int = 15
    ) throws -> RawResponse {
        try exchange(
            port: port, bytes: Array(requestText(method: method, path: path, headers: headers).utf8),
            receiveTimeoutSeconds: receiveTimeoutSeconds)
    }

    /// The request text for `method path` with a Host header and `headers`.
    static func requestText(method: String = "GET", path: String, headers: [(String, String)] = []) -> String {
        var text = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for (name, value) in headers {
            text += "\(name): \(value)\r\n"
        }
        return text + "\r\n"
    }

    private static func split(_ data: [UInt8], wasReset: Bool) throws -> RawResponse {
        guard let end = findHeadEnd(data) else {
            throw Failure(description: "no complete head in \(data.count) bytes")
        }
        let headText = String(decoding: data[0..<end], as: UTF8.self)
        var lines = headText.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst()
        let headers = lines.filter { !$0.isEmpty }.map { line -> HeaderField in
            guard let colon = line.firstIndex(of: ":") else { return HeaderField(line, "") }
            return HeaderField(
                String(line[..<colon]),
                String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces))
        }
        return RawResponse(
            statusLine: statusLine, headers: headers, body: Array(data[(end + 4)...]), wasReset: wasReset)
    }

    private static func findHeadEnd(_ data: [UInt8]) -> Int? {
        guard data.count >= 4 else { return nil }
        for index in 0...(data.count - 4)
        where data[index] == 0x0D && data[index + 1] == 0x0A && data[index + 2] == 0x0D && data[index + 3] == 0x0A {
            return index
        }
        return nil
    }
}
