import Foundation
import LoopbackServer
import ProcessSpawning
import Testing

@Suite("Misbehavior on request")
struct BehaviorTests {
    let content = Resource.generatedBytes(seed: 5, range: 0..<200_000)

    func makeServer(_ behavior: Behavior, configuration: LoopbackServer.Configuration = .init()) throws
        -> LoopbackServer
    {
        let server = try LoopbackServer(configuration: configuration)
        server.register(.bytes(content, etag: "\"e\"", behavior: behavior), at: "/f")
        return server
    }

    @Test("ignoreRange answers 200 with the whole body")
    func ignoreRange() throws {
        let server = try makeServer(Behavior(ignoreRange: true))
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=10-")])
        #expect(response.status == 200)
        #expect(response.header("Content-Range") == nil)
        expectSameBytes(response.body, content)
    }

    @Test("ignoreIfRange honours Range even when If-Range does not match")
    func ignoreIfRange() throws {
        let server = try makeServer(Behavior(ignoreIfRange: true))
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(
            port: server.port, path: "/f", headers: [("Range", "bytes=10-"), ("If-Range", "\"stale\"")])
        #expect(response.status == 206)
        expectSameBytes(response.body, Array(content[10...]))
    }

    @Test("dropAfterBytes sends fewer bytes than the announced Content-Length")
    func dropAfterBytes() throws {
        let server = try makeServer(Behavior(dropAfterBytes: 1234))
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(port: server.port, path: "/f")
        #expect(response.status == 200)
        #expect(response.header("Content-Length") == "200000")
        expectSameBytes(response.body, Array(content[0..<1234]))
        #expect(!response.wasReset)
    }

    @Test("resetOnDrop makes the peer see a connection reset")
    func resetOnDrop() throws {
        let server = try makeServer(Behavior(dropAfterBytes: 100, resetOnDrop: true))
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(port: server.port, path: "/f")
        #expect(response.wasReset)
        #expect(response.body.count <= 100)
    }

    @Test("The server-wide dropAfterBytes applies unless a behavior overrides it")
    func configurationDrop() throws {
        let server = try makeServer(.normal, configuration: .init(dropAfterBytes: 10))
        defer { server.shutdown() }
        server.register(.bytes(content, behavior: Behavior(dropAfterBytes: 20)), at: "/g")
        #expect(try RawHTTPClient.request(port: server.port, path: "/f").body.count == 10)
        #expect(try RawHTTPClient.request(port: server.port, path: "/g").body.count == 20)
    }

    @Test("rangeStartShift answers a 206 at the wrong offset, honestly described")
    func rangeStartShift() throws {
        let server = try makeServer(Behavior(rangeStartShift: -10))
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=100-")])
        #expect(response.status == 206)
        #expect(response.header("Content-Range") == "bytes 90-199999/200000")
        expectSameBytes(response.body, Array(content[90...]))
    }

    @Test("maxPartialLength answers a short 206 with an honest Content-Range")
    func maxPartialLength() throws {
        let server = try makeServer(Behavior(maxPartialLength: 50))
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=100-")])
        #expect(response.status == 206)
        #expect(response.header("Content-Range") == "bytes 100-149/200000")
        #expect(response.header("Content-Length") == "50")
        expectSameBytes(response.body, Array(content[100..<150]))
    }

    @Test("A status behavior answers that status with an HTML body and Retry-After")
    func status() throws {
        let server = try makeServer(Behavior(status: 503, retryAfter: "2"))
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(port: server.port, path: "/f")
        #expect(response.statusLine == "HTTP/1.1 503 Service Unavailable")
        #expect(response.header("Retry-After") == "2")
        #expect(response.header("Content-Type") == "text/html")
        #expect(response.text == "<html><body><h1>503 Service Unavailable</h1></body></html>\n")
        #expect(response.header("Content-Length") == String(response.body.count))
    }

    @Test("A redirect behavior answers with Location and a small body")
    func redirect() throws {
        let server = try makeServer(Behavior(redirect: Redirect(status: 301, location: "/elsewhere")))
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(port: server.port, path: "/f")
        #expect(response.status == 301)
        #expect(response.header("Location") == "/elsewhere")
        #expect(!response.body.isEmpty)
    }

    @Test("chunked uses Transfer-Encoding chunked and the dechunked body is the content")
    func chunked() throws {
        let server = try makeServer(Behavior(chunked: true))
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=5-")])
        #expect(response.status == 206)
        #expect(response.header("Transfer-Encoding") == "chunked")
        #expect(response.header("Content-Length") == nil)
        let (body, complete) = response.dechunked()
        #expect(complete)
        expectSameBytes(body, Array(content[5...]))
    }

    @Test("chunked with dropAfterBytes closes without the last chunk")
    func chunkedDrop() throws {
        let server = try makeServer(Behavior(dropAfterBytes: 777, chunked: true))
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(port: server.port, path: "/f")
        let (body, complete) = response.dechunked()
        #expect(!complete)
        expectSameBytes(body, Array(content[0..<777]))
    }

    @Test("gzipWhenAccepted sends a valid gzip stream that gzip -dc decodes to the content")
    func gzip() throws {
        let server = try makeServer(Behavior(gzipWhenAccepted: true))
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(
            port: server.port, path: "/f", headers: [("Accept-Encoding", "gzip, deflate"), ("Range", "bytes=10-")])
        #expect(response.status == 200)
        #expect(response.header("Content-Encoding") == "gzip")
        #expect(response.header("Content-Length") == String(response.body.count))
        #expect(Array(response.body.prefix(3)) == [0x1F, 0x8B, 0x08])
        #expect(try gunzip(response.body) == content)

        let identity = try RawHTTPClient.request(
            port: server.port, path: "/f", headers: [("Accept-Encoding", "identity")])
        #expect(identity.header("Content-Encoding") == nil)
        expectSameBytes(identity.body, content)
        let refused = try RawHTTPClient.request(
            port: server.port, path: "/f", headers: [("Accept-Encoding", "gzip;q=0, *")])
        #expect(refused.header("Content-Encoding") == nil)
    }

    @Test("An empty body gzips to a valid stream too")
    func gzipEmpty() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes([], behavior: Behavior(gzipWhenAccepted: true)), at: "/e")
        let response = try RawHTTPClient.request(port: server.port, path: "/e", headers: [("Accept-Encoding", "gzip")])
        #expect(try gunzip(response.body) == [])
    }

    @Test("omitContentRangeOn416, contentLengthOverride and extraContentRange send raw misbehavior")
    func rawOverrides() throws {
        let server = try makeServer(
            Behavior(omitContentRangeOn416: true, contentLengthOverride: "abc", extraContentRange: "bytes 0-1/2"))
        defer { server.shutdown() }
        let unsatisfiable = try RawHTTPClient.request(
            port: server.port, path: "/f", headers: [("Range", "bytes=999999-")])
        #expect(unsatisfiable.status == 416)
        #expect(unsatisfiable.header("Content-Range") == nil)
        let partial = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=3-4")])
        #expect(partial.status == 206)
        #expect(partial.header("Content-Range") == "bytes 0-1/2")
        #expect(partial.header("Content-Length") == "abc")
        expectSameBytes(partial.body, Array(content[3...4]))
    }

    @Test("Throttling paces the body at roughly the requested rate")
    func throttle() throws {
        let server = try makeServer(Behavior(throttleBytesPerSecond: 400_000))
        defer { server.shutdown() }
        let start = ContinuousClock.now
        let response = try RawHTTPClient.request(port: server.port, path: "/f")
        let elapsed = ContinuousClock.now - start
        expectSameBytes(response.body, content)
        #expect(elapsed >= .milliseconds(400), "200 kB at 400 kB/s took \(elapsed)")
        // Loosely bounded above, as a busy machine can slow any transfer: this catches pacing gone wrong by a
        // large factor, not a few hundred milliseconds.
        #expect(elapsed < .seconds(30), "200 kB at 400 kB/s took \(elapsed)")
    }

    @Test("An enqueued behavior applies to the next request only")
    func oneShotBehavior() throws {
        let server = try makeServer(.normal)
        defer { server.shutdown() }
        server.enqueue(behavior: Behavior(status: 500), for: "/f")
        server.enqueue(behavior: Behavior(dropAfterBytes: 3), for: "/f")
        #expect(server.queuedCount(for: "/f") == 2)
        #expect(try RawHTTPClient.request(port: server.port, path: "/f").status == 500)
        #expect(try RawHTTPClient.request(port: server.port, path: "/f").body.count == 3)
        #expect(try RawHTTPClient.request(port: server.port, path: "/f").body == content)
    }

    private func gunzip(_ data: [UInt8]) throws -> [UInt8] {
        let (termination, decoded) = try SpawnedProcess.run(
            executable: URL(fileURLWithPath: "/usr/bin/gzip"), arguments: ["-dc"], input: Data(data))
        #expect(termination == .exited(0))
        return Array(decoded)
    }
}
