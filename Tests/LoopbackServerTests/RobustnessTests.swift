import Foundation
import LoopbackServer
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Robustness and lifecycle")
struct RobustnessTests {
    @Test("Malformed requests get 400 and the server keeps working")
    func malformed() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes([1, 2]), at: "/ok")
        let garbage = [
            "GARBAGE\r\n\r\n", "GET /\r\n\r\n", "GET  / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\nNoColon\r\n\r\n",
            "GET / HTTP/1.1\r\n folded: x\r\n\r\n", "G(T / HTTP/1.1\r\n\r\n", "GET / XTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
        ]
        for raw in garbage {
            let response = try RawHTTPClient.exchange(port: server.port, raw: raw)
            #expect(response.status == 400, "\(raw.debugDescription)")
        }
        let binary = try RawHTTPClient.exchange(port: server.port, bytes: [0xFF, 0x00, 0x13, 0x0D, 0x0A, 0x0D, 0x0A])
        #expect(binary.status == 400)
        #expect(try RawHTTPClient.exchange(port: server.port, raw: "GET / HTTP/2.0\r\n\r\n").status == 505)
        #expect(try RawHTTPClient.request(port: server.port, path: "/ok").body == [1, 2])
        #expect(server.requests.map(\.path) == ["/ok"])
    }

    @Test("An oversized request head gets 431")
    func oversizedHead() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let raw = "GET / HTTP/1.1\r\nX-Big: \(String(repeating: "a", count: 70_000))\r\n\r\n"
        #expect(try RawHTTPClient.exchange(port: server.port, raw: raw).status == 431)
    }

    /// A head that never ends must not be read for ever: past 64 KiB the server answers 431 and closes, without
    /// waiting for the empty line; a head just under the limit is still served.
    @Test("A request head that grows past 64 KiB without ending gets 431 and the connection is closed")
    func endlessHead() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes([1, 2, 3]), at: "/ok")
        // 70 KiB of header lines and no empty line: only the limit can end the read.
        let endless =
            "GET /ok HTTP/1.1\r\n"
            + String(repeating: "X-Filler: \(String(repeating: "a", count: 1013))\r\n", count: 70)
        #expect(endless.utf8.count > 70 * 1024)
        // `exchange` returns only once the server closed the connection (its reads give up after 15 s, and throw).
        let refused = try RawHTTPClient.exchange(port: server.port, bytes: Array(endless.utf8))
        #expect(refused.status == 431)
        #expect(refused.statusLine == "HTTP/1.1 431 Request Header Fields Too Large")
        #expect(refused.header("Connection") == "close")
        #expect(server.requests.isEmpty, "an oversized head is not a request")

        let large = RawHTTPClient.requestText(
            path: "/ok", headers: (0..<60).map { ("X-Filler-\($0)", String(repeating: "b", count: 1000)) })
        #expect(large.utf8.count < 64 * 1024)
        #expect(try RawHTTPClient.exchange(port: server.port, raw: large).body == [1, 2, 3])
    }

    /// `resumable serve` runs until stopped: a server that records nothing must keep nothing per request, neither
    /// the requests nor the counters of the ever new paths a client may ask for.
    @Test("A server that records no requests keeps none, and no counters, however many it serves")
    func recordsNothing() throws {
        var configuration = LoopbackServer.Configuration()
        configuration.recordsRequests = false
        let server = try LoopbackServer(configuration: configuration)
        defer { server.shutdown() }
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("loopback-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try Data([9, 8, 7]).write(to: directory.appendingPathComponent("file.bin"))
        server.serveFiles(from: directory)
        server.register(.bytes([1]), at: "/registered")
        let paths = (0..<40).flatMap { ["/file.bin", "/missing-\($0)", "/registered"] }
        for path in paths {
            let response = try RawHTTPClient.request(port: server.port, path: path)
            #expect(response.status == (path.hasPrefix("/missing") ? 404 : 200), "\(path)")
        }
        #expect(server.requests.isEmpty)
        #expect(server.requests(for: "/file.bin").isEmpty)
        for path in Set(paths) {
            #expect(server.peakConcurrentRequests(for: path) == 0, "\(path): counters kept")
            #expect(server.concurrentRequests(for: path) == 0, "\(path)")
        }

        // The default records every request, as the tests read them.
        let recording = try LoopbackServer()
        defer { recording.shutdown() }
        recording.serveFiles(from: directory)
        for path in paths.prefix(6) {
            _ = try RawHTTPClient.request(port: recording.port, path: path)
        }
        #expect(recording.requests.map(\.path) == Array(paths.prefix(6)))
        #expect(recording.peakConcurrentRequests(for: "/missing-0") == 1)
    }

    @Test("Bare LF line endings and non-ASCII header bytes are tolerated")
    func lenientParsing() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes([7]), at: "/lf")
        let response = try RawHTTPClient.exchange(port: server.port, raw: "\r\nGET /lf HTTP/1.0\nX-N: caf\u{E9}\n\n")
        #expect(response.body == [7])
        #expect(server.requests.first?.header("X-N") != nil)
    }

    @Test("A client that disconnects early does not disturb the server")
    func earlyDisconnect() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.generated(length: 50 << 20, seed: 1), at: "/big")
        for _ in 0..<3 {
            let descriptor = try RawHTTPClient.connect(port: server.port)
            try RawHTTPClient.send(descriptor, Array(RawHTTPClient.requestText(path: "/big").utf8))
            var buffer = [UInt8](repeating: 0, count: 1000)
            _ = recv(descriptor, &buffer, buffer.count, 0)
            close(descriptor)
        }
        let half = try RawHTTPClient.connect(port: server.port)
        try RawHTTPClient.send(half, Array("GET /big HT".utf8))
        close(half)
        #expect(try RawHTTPClient.request(port: server.port, method: "HEAD", path: "/big").status == 200)
    }

    @Test("Twenty concurrent connections are served")
    func concurrency() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let content = Resource.generatedBytes(seed: 2, range: 0..<300_000)
        server.register(.bytes(content), at: "/c")
        let port = server.port
        let results = await withTaskGroup(of: Bool.self) { group in
            for index in 0..<20 {
                group.addTask {
                    let response = try? RawHTTPClient.request(
                        port: port, path: "/c", headers: [("Range", "bytes=\(index * 1000)-")])
                    return response?.body == Array(content[(index * 1000)...])
                }
            }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(results.count == 20 && results.allSatisfy { $0 })
        #expect(server.requests.count == 20)
    }

    @Test("shutdown is idempotent, refuses new connections and interrupts slow transfers")
    func shutdown() throws {
        let server = try LoopbackServer(configuration: .init(throttleBytesPerSecond: 1000))
        server.register(.generated(length: 1 << 20, seed: 1), at: "/slow")
        let port = server.port
        let slow = try RawHTTPClient.connect(port: port)
        defer { close(slow) }
        try RawHTTPClient.send(slow, Array(RawHTTPClient.requestText(path: "/slow").utf8))
        // The transfer is under way once its first byte arrived (1 MiB at 1000 B/s would take 17 minutes).
        var first: UInt8 = 0
        #expect(recv(slow, &first, 1, 0) == 1)
        let start = ContinuousClock.now
        server.shutdown()
        // Bounded loosely (the machine may be busy): far below the 17 minutes the transfer would take.
        #expect(ContinuousClock.now - start < .seconds(300))
        server.shutdown()
        #expect(throws: (any Error).self) { try RawHTTPClient.request(port: port, path: "/slow") }
    }

    @Test("Deinit shuts the server down")
    func deinitShutsDown() throws {
        var server: LoopbackServer? = try LoopbackServer()
        let port = try #require(server?.port)
        #expect(try RawHTTPClient.request(port: port, path: "/").status == 404)
        server = nil
        #expect(throws: (any Error).self) { try RawHTTPClient.request(port: port, path: "/") }
    }

    @Test("Binding an invalid host or a taken port throws LoopbackServerError")
    func bindFailures() throws {
        #expect(throws: LoopbackServerError.self) {
            _ = try LoopbackServer(configuration: .init(host: "not-an-address"))
        }
        let server = try LoopbackServer()
        defer { server.shutdown() }
        #expect(throws: LoopbackServerError.self) {
            _ = try LoopbackServer(configuration: .init(port: server.port))
        }
    }
}
