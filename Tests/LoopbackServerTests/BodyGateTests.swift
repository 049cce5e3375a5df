import Foundation
import LoopbackServer
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// ``BodyGate``: a body held at an exact byte count until the test moves or opens the gate.
@Suite("Body gate")
struct BodyGateTests {
    let content = Resource.generatedBytes(seed: 8, range: 0..<300_000)

    func makeServer(_ behavior: Behavior) throws -> LoopbackServer {
        let server = try LoopbackServer()
        server.register(.bytes(content, etag: "\"g\"", behavior: behavior), at: "/f")
        return server
    }

    /// A connection that sent a request and reads what has arrived.
    final class Reader {
        let descriptor: Int32
        private(set) var received: [UInt8] = []

        init(port: UInt16, headers: [(String, String)] = []) throws {
            descriptor = try RawHTTPClient.connect(port: port)
            // A generous receive timeout: the reads below wait for bytes the server is known to send.
            var timeout = timeval(tv_sec: 60, tv_usec: 0)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            try RawHTTPClient.send(descriptor, Array(RawHTTPClient.requestText(path: "/f", headers: headers).utf8))
        }

        deinit {
            close(descriptor)
        }

        /// Reads until the body has at least `count` bytes (or the server closes the connection).
        func read(bodyBytes count: Int) {
            var buffer = [UInt8](repeating: 0, count: 65536)
            while (body?.count ?? -1) < count {
                let received = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
                if received < 0 && errno == EINTR { continue }
                guard received > 0 else { return }
                self.received += buffer[0..<received]
            }
        }

        /// Reads until the server closes the connection.
        func readToEnd() {
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { return }
                received += buffer[0..<count]
            }
        }

        /// The body received so far (after the head), or `nil` before the head is complete.
        var body: [UInt8]? {
            let separator: [UInt8] = [13, 10, 13, 10]
            guard received.count >= 4 else { return nil }
            for index in 0...(received.count - 4) where Array(received[index..<index + 4]) == separator {
                return Array(received[(index + 4)...])
            }
            return nil
        }
    }

    @Test("A response stops at the limit exactly, goes on by the amount advanced, and ends whole once opened")
    func holdAdvanceOpen() async throws {
        let gate = BodyGate(holdingAfter: 100_000)
        let server = try makeServer(Behavior(gate: gate))
        defer { server.shutdown() }
        let reader = try Reader(port: server.port)

        // Read first: 100 000 unread bytes need not fit in the sockets' buffers.
        reader.read(bodyBytes: 100_000)
        #expect(await gate.waitUntilHeld())
        expectSameBytes(reader.body, Array(content[0..<100_000]))
        #expect(gate.arrivals == 1)

        gate.advance(by: 50_000)
        reader.read(bodyBytes: 150_000)
        #expect(await waitUntil { gate.arrivals == 2 && gate.heldCount == 1 })
        expectSameBytes(reader.body, Array(content[0..<150_000]))
        #expect(gate.limit == 150_000)

        gate.open()
        reader.readToEnd()
        expectSameBytes(reader.body, content)
        #expect(gate.limit == nil)
        #expect(await waitUntil { gate.heldCount == 0 })
    }

    @Test("The count is per response: a range request is held after as many of its own body bytes")
    func perResponse() async throws {
        let gate = BodyGate(holdingAfter: 10_000)
        let server = try makeServer(Behavior(gate: gate))
        defer { server.shutdown() }
        let whole = try Reader(port: server.port)
        let ranged = try Reader(port: server.port, headers: [("Range", "bytes=200000-")])
        #expect(await gate.waitUntilHeld(count: 2))
        whole.read(bodyBytes: 10_000)
        ranged.read(bodyBytes: 10_000)
        expectSameBytes(whole.body, Array(content[0..<10_000]))
        expectSameBytes(ranged.body, Array(content[200_000..<210_000]))
        gate.open()
        ranged.readToEnd()
        expectSameBytes(ranged.body, Array(content[200_000...]))
    }

    @Test("A limit of 0 holds the response right after its head")
    func holdAfterHead() async throws {
        let gate = BodyGate(holdingAfter: 0)
        let server = try makeServer(Behavior(gate: gate))
        defer { server.shutdown() }
        let reader = try Reader(port: server.port)
        #expect(await gate.waitUntilHeld())
        reader.read(bodyBytes: 0)
        expectSameBytes(reader.body, [UInt8]())
        #expect(String(decoding: reader.received, as: UTF8.self).contains("Content-Length: 300000"))
        gate.open()
        reader.readToEnd()
        expectSameBytes(reader.body, content)
    }

    @Test("A held response lets go when its client closes the connection")
    func clientGoesAway() async throws {
        let gate = BodyGate(holdingAfter: 1000)
        let server = try makeServer(Behavior(gate: gate))
        defer { server.shutdown() }
        var reader: Reader? = try Reader(port: server.port)
        #expect(await gate.waitUntilHeld())
        reader = nil
        #expect(await waitUntil { gate.heldCount == 0 })
        #expect(gate.arrivals == 1)
        _ = reader
        // The server is still fine: another request is held and then served whole.
        let second = try Reader(port: server.port)
        #expect(await gate.waitUntilHeld())
        gate.open()
        second.readToEnd()
        expectSameBytes(second.body, content)
    }

    @Test("Shutting the server down ends a held response")
    func shutdownWhileHeld() async throws {
        let gate = BodyGate(holdingAfter: 5000)
        let server = try makeServer(Behavior(gate: gate))
        let reader = try Reader(port: server.port)
        #expect(await gate.waitUntilHeld())
        server.shutdown()
        #expect(gate.heldCount == 0, "shutdown joined the connection thread, which left the gate")
        reader.readToEnd()
        expectSameBytes(reader.body, Array(content[0..<5000]))
    }

    @Test("A gate works with chunked framing and with a drop limit below it")
    func chunkedAndDrop() async throws {
        let gate = BodyGate(holdingAfter: 70_000)
        let server = try makeServer(Behavior(chunked: true, gate: gate))
        defer { server.shutdown() }
        let reader = try Reader(port: server.port)
        #expect(await gate.waitUntilHeld())
        gate.open()
        reader.readToEnd()
        let framed = RawResponse(statusLine: "", headers: [], body: reader.body ?? [], wasReset: false)
        expectSameBytes(framed.dechunked().body, content)
        #expect(framed.dechunked().complete)

        let dropping = BodyGate(holdingAfter: 70_000)
        server.register(.bytes(content, behavior: Behavior(dropAfterBytes: 1000, gate: dropping)), at: "/f")
        let cut = try RawHTTPClient.request(port: server.port, path: "/f")
        expectSameBytes(cut.body, Array(content[0..<1000]), "the drop comes first; the gate is never reached")
        #expect(dropping.arrivals == 0)
    }

    /// Polls `condition` every 5 ms for up to 60 s, on `Task.sleep`.
    private func waitUntil(_ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return condition()
    }
}
