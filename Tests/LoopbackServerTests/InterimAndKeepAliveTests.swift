import Foundation
import LoopbackServer
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("Interim responses and persistent connections")
struct InterimAndKeepAliveTests {
    let content = Resource.generatedBytes(seed: 9, range: 0..<10_000)

    @Test("interimResponses go on the wire, in order, before the final head")
    func interimBeforeFinal() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let interim = [InterimResponse.continue, .earlyHints(link: "</a.css>; rel=preload")]
        server.register(.bytes(content, behavior: Behavior(interimResponses: interim)), at: "/f")
        let raw = try RawHTTPClient.exchange(port: server.port, raw: RawHTTPClient.requestText(path: "/f"))
        // The raw client splits at the first empty line: the 100's head, then everything after it.
        #expect(raw.statusLine == "HTTP/1.1 100 Continue")
        #expect(raw.headers.isEmpty)
        let rest = String(decoding: raw.body, as: UTF8.self)
        #expect(rest.hasPrefix("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\n"))
        expectSameBytes(Array(raw.body.suffix(content.count)), content)
    }

    @Test("A 206 for a range gets the interim responses too; a one-shot behavior without them does not")
    func interimOnPartialContent() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(
            .bytes(content, behavior: Behavior(interimResponses: [.earlyHints(link: "</b>")])), at: "/f")
        let partial = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=100-")])
        #expect(partial.status == 103)
        #expect(String(decoding: partial.body, as: UTF8.self).hasPrefix("HTTP/1.1 206 Partial Content\r\n"))
        server.enqueue(behavior: .normal, for: "/f")
        let plain = try RawHTTPClient.request(port: server.port, path: "/f")
        #expect(plain.status == 200)
        expectSameBytes(plain.body, content)
    }

    @Test("By default every response closes its connection, and each request has a connection of its own")
    func closesByDefault() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes(content), at: "/f")
        let first = try RawHTTPClient.request(port: server.port, path: "/f")
        let second = try RawHTTPClient.request(port: server.port, path: "/f")
        #expect(first.header("Connection") == "close")
        #expect(second.header("Connection") == "close")
        #expect(server.requests.map(\.connection) == [1, 2])
    }

    @Test("With keepAlive, requests follow each other on one connection until the client asks to close")
    func keepAlive() throws {
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        defer { server.shutdown() }
        server.register(.bytes(content), at: "/f")
        let descriptor = try RawHTTPClient.connect(port: server.port)
        defer { close(descriptor) }
        // Two requests sent at once (pipelined): the second waits in the server's buffer.
        let twice = RawHTTPClient.requestText(path: "/f") + RawHTTPClient.requestText(path: "/f?2")
        try RawHTTPClient.send(descriptor, Array(twice.utf8))
        var pending: [UInt8] = []
        for _ in 0..<2 {
            let (head, body) = try Self.readResponse(descriptor, buffer: &pending)
            #expect(head.hasPrefix("HTTP/1.1 200 OK\r\n"))
            #expect(!head.contains("Connection:"))
            expectSameBytes(body, content)
        }
        // A third request asking to close is answered, then the server closes.
        try RawHTTPClient.send(
            descriptor, Array(RawHTTPClient.requestText(path: "/f", headers: [("Connection", "close")]).utf8))
        let (head, body) = try Self.readResponse(descriptor, buffer: &pending)
        #expect(head.contains("Connection: close\r\n"))
        expectSameBytes(body, content)
        var byte: UInt8 = 0
        #expect(recv(descriptor, &byte, 1, 0) == 0, "the server closed the connection")
        #expect(server.requests.map(\.connection) == [1, 1, 1])
        #expect(server.requests.map(\.target) == ["/f", "/f?2", "/f"])
    }

    /// Reads one response framed by `Content-Length` from `descriptor`; `buffer` keeps what follows it.
    static func readResponse(_ descriptor: Int32, buffer: inout [UInt8]) throws -> (head: String, body: [UInt8]) {
        var chunk = [UInt8](repeating: 0, count: 65536)
        func fill() throws {
            let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { throw RawHTTPClient.Failure(description: "closed after \(buffer.count) bytes") }
            buffer += chunk[0..<count]
        }
        let separator: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A]
        var end = 0
        while true {
            if buffer.count >= 4,
                let found = (0...(buffer.count - 4)).first(where: {
                    Array(buffer[$0..<$0 + 4]) == separator
                })
            {
                end = found + 4
                break
            }
            try fill()
        }
        let head = String(decoding: buffer[0..<end], as: UTF8.self)
        let lengthLine = head.components(separatedBy: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
        let length = Int(lengthLine?.split(separator: ":")[1].trimmingCharacters(in: .whitespaces) ?? "") ?? 0
        while buffer.count < end + length { try fill() }
        let body = Array(buffer[end..<end + length])
        buffer.removeFirst(end + length)
        return (head, body)
    }

    @Test("With keepAlive, a cut body still closes the connection")
    func keepAliveClosesAfterDrop() throws {
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        defer { server.shutdown() }
        server.register(.bytes(content, behavior: Behavior(dropAfterBytes: 500)), at: "/f")
        let response = try RawHTTPClient.request(port: server.port, path: "/f")
        #expect(response.header("Connection") == "close")
        #expect(response.body.count == 500)
    }
}
