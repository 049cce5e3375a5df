import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A raw HTTP/1.1 server on 127.0.0.1 for answers ``LoopbackServer`` would never write: header bytes that are not
/// UTF-8, a validator with odd whitespace, a hand-made transfer coding, a body cut at an exact byte. Each connection's
/// request head is recorded and handed to the test's script, which writes the answer; the connection is then closed.
public final class RawScriptServer: Sendable {
    /// How a script's answer went.
    public enum Outcome: Sendable, Equatable {
        /// The client closed the connection (a send failed) after this many bytes of the scripted part.
        case clientLeft(Int)
        /// Everything scripted was sent; the number is the script's own (a status, a byte count).
        case completed(Int)
    }

    /// The bound port.
    public let port: UInt16
    private let listener: Int32
    private final class Recorded: Sendable {
        let state = Mutex<(heads: [[UInt8]], outcomes: [Outcome])>(([], []))
    }
    private let recorded = Recorded()

    /// The request heads received, in order.
    public var requests: [[UInt8]] { recorded.state.withLock { $0.heads } }
    /// The outcome of each script run, in the order they ended.
    public var outcomes: [Outcome] { recorded.state.withLock { $0.outcomes } }

    /// Answers each connection on a thread of its own: `respond` gets the request head, its index, and a `send` that
    /// writes bytes and returns false once the client is gone.
    public init(
        respond: @escaping @Sendable (_ head: [UInt8], _ index: Int, _ send: ([UInt8]) -> Bool) -> Outcome
    ) throws {
        let (descriptor, boundPort) = try RawListeningSocket.open()
        port = boundPort
        listener = descriptor
        let recorded = self.recorded
        let thread = Thread {
            while true {
                let client = accept(descriptor, nil, nil)
                if client < 0 { return }
                let worker = Thread {
                    let head = Self.readHead(client)
                    let index = recorded.state.withLock { state in
                        state.heads.append(head)
                        return state.heads.count - 1
                    }
                    let outcome = respond(head, index) { bytes in Self.sendAll(bytes, to: client) }
                    recorded.state.withLock { $0.outcomes.append(outcome) }
                    shutdown(client, Int32(SHUT_RDWR))
                    close(client)
                }
                worker.start()
            }
        }
        thread.start()
    }

    /// Answers each connection with the bytes `respond` returns for its request head and index.
    public convenience init(respond: @escaping @Sendable (_ head: [UInt8], _ index: Int) -> [UInt8]) throws {
        try self.init { head, index, send in
            let response = respond(head, index)
            return send(response) ? .completed(response.count) : .clientLeft(0)
        }
    }

    /// Stops accepting connections.
    public func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    /// A response head that closes the connection: the status line, `Connection: close`, the lines, an `ETag` of
    /// exactly `etag` when given, and the blank line.
    public static func head(_ status: String, _ lines: [String], etag: [UInt8]? = nil) -> [UInt8] {
        var bytes = Array("HTTP/1.1 \(status)\r\nConnection: close\r\n".utf8)
        for line in lines { bytes += Array("\(line)\r\n".utf8) }
        if let etag { bytes += Array("ETag: ".utf8) + etag + Array("\r\n".utf8) }
        return bytes + Array("\r\n".utf8)
    }

    /// The raw bytes of the first `name` header in a request head, without the spaces and tabs around them.
    public static func header(_ name: String, in head: [UInt8]) -> [UInt8]? {
        let prefix = Array((name + ":").lowercased().utf8)
        for line in head.split(separator: UInt8(ascii: "\n")) {
            var line = Array(line)
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            guard line.count >= prefix.count,
                zip(line, prefix).allSatisfy({ (0x41...0x5A).contains($0) ? $0 | 0x20 == $1 : $0 == $1 })
            else { continue }
            let isBlank = { (byte: UInt8) in byte == 32 || byte == 9 }
            return Array(line.dropFirst(prefix.count).drop(while: isBlank).reversed().drop(while: isBlank).reversed())
        }
        return nil
    }

    private static func readHead(_ client: Int32) -> [UInt8] {
        var head: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !(head.count >= 4 && Array(head.suffix(4)) == Array("\r\n\r\n".utf8)) {
            let count = recv(client, &buffer, buffer.count, 0)
            if count <= 0 { break }
            head += buffer[0..<count]
        }
        return head
    }

    private static func sendAll(_ bytes: [UInt8], to client: Int32) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes {
                send(client, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
            }
            if sent <= 0 { return false }
            offset += sent
        }
        return true
    }
}
