import Foundation
import LoopbackServer
import Testing

@Suite("Plain GET and HEAD")
struct BasicResponseTests {
    @Test("A full GET gets 200 with the whole body and every validator")
    func fullGet() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let content = Resource.generatedBytes(seed: 7, range: 0..<10_000)
        server.register(
            .bytes(content, etag: "\"v1\"", contentDisposition: "attachment; filename=\"a.bin\""), at: "/a.bin")
        let response = try RawHTTPClient.request(port: server.port, path: "/a.bin")
        #expect(response.statusLine == "HTTP/1.1 200 OK")
        #expect(response.header("Content-Length") == "10000")
        #expect(response.header("ETag") == "\"v1\"")
        #expect(response.header("Accept-Ranges") == "bytes")
        #expect(response.header("Content-Type") == "application/octet-stream")
        #expect(response.header("Content-Disposition") == "attachment; filename=\"a.bin\"")
        #expect(response.header("Connection") == "close")
        #expect(response.header("Last-Modified")?.hasSuffix(" GMT") == true)
        #expect(response.header("Date")?.hasSuffix(" GMT") == true)
        expectSameBytes(response.body, content)
    }

    @Test("A HEAD gets the same headers as GET and no body")
    func head() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.generated(length: 5000, seed: 1), at: "/g")
        let response = try RawHTTPClient.request(port: server.port, method: "HEAD", path: "/g")
        #expect(response.status == 200)
        #expect(response.header("Content-Length") == "5000")
        #expect(response.header("ETag") != nil)
        #expect(response.body.isEmpty)
    }

    @Test("Default validators are a strong content-derived ETag and a Last-Modified an hour ago")
    func defaultValidators() throws {
        let resource = Resource.bytes([1, 2, 3])
        let etag = try #require(resource.etag)
        #expect(etag.hasPrefix("\"") && etag.hasSuffix("\""))
        #expect(Resource.bytes([1, 2, 4]).etag != etag)
        #expect(Resource.bytes([1, 2, 3]).etag == etag)
        #expect(Resource.bytes([1], etag: nil, lastModified: nil).etag == nil)
        #expect(resource.lastModified?.hasSuffix(" GMT") == true)
        #expect(resource.date == nil)
    }

    @Test("Fixed Date, omitted Accept-Ranges and extra headers are sent as configured")
    func configuredHeaders() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let date = "Tue, 15 Nov 1994 08:12:31 GMT"
        server.register(
            .bytes(
                [1, 2, 3], lastModified: "Mon, 14 Nov 1994 08:12:31 GMT", date: date, contentType: "text/plain",
                acceptRanges: nil, extraHeaders: [HeaderField("X-Test", "yes")]),
            at: "/x")
        let response = try RawHTTPClient.request(port: server.port, path: "/x")
        #expect(response.header("Date") == date)
        #expect(response.header("Last-Modified") == "Mon, 14 Nov 1994 08:12:31 GMT")
        #expect(response.header("Accept-Ranges") == nil)
        #expect(response.header("Content-Type") == "text/plain")
        #expect(response.header("X-Test") == "yes")
    }

    @Test("An unknown path gets 404 with an HTML body")
    func notFound() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(port: server.port, path: "/missing")
        #expect(response.status == 404)
        #expect(response.header("Content-Type") == "text/html")
        #expect(response.text.contains("404 Not Found"))
    }

    @Test("Methods other than GET and HEAD get 405 with Allow")
    func methodNotAllowed() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes([1]), at: "/a")
        let response = try RawHTTPClient.request(port: server.port, method: "POST", path: "/a")
        #expect(response.status == 405)
        #expect(response.header("Allow") == "GET, HEAD")
    }

    @Test("Re-registering a path replaces the resource and removing it gives 404")
    func replaceAndRemove() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes([1, 2], etag: "\"a\""), at: "/r")
        server.register(.bytes([3, 4, 5], etag: "\"b\""), at: "/r")
        let response = try RawHTTPClient.request(port: server.port, path: "/r")
        #expect(response.body == [3, 4, 5])
        #expect(response.header("ETag") == "\"b\"")
        server.removeResource(at: "/r")
        #expect(try RawHTTPClient.request(port: server.port, path: "/r").status == 404)
    }

    @Test("Generated content is deterministic and byte(at:) agrees with generatedBytes")
    func generatedContent() {
        let resource = Resource.generated(length: 100, seed: 42)
        let bytes = Resource.generatedBytes(seed: 42, range: 0..<100)
        #expect(resource.contentBytes() == bytes)
        #expect((0..<100).allSatisfy { resource.byte(at: Int64($0)) == bytes[$0] })
        #expect(Resource.generatedBytes(seed: 42, range: 13..<57) == Array(bytes[13..<57]))
        #expect(Resource.generatedBytes(seed: 43, range: 0..<100) != bytes)
        #expect(resource.length == 100)
    }

    @Test("A large unthrottled body streams fast")
    func fastPath() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let length: Int64 = 32 << 20
        server.register(.generated(length: length, seed: 3), at: "/big")
        let start = ContinuousClock.now
        let response = try RawHTTPClient.request(port: server.port, path: "/big")
        let elapsed = ContinuousClock.now - start
        #expect(response.body.count == Int(length))
        #expect(Array(response.body.suffix(16)) == Resource.generatedBytes(seed: 3, range: length - 16..<length))
        // Bounded loosely (a parallel run on a busy machine slows any transfer): this catches a body paced by
        // mistake (at 64 KiB/s it would take over 8 minutes), not a slow machine.
        #expect(elapsed < .seconds(60))
    }

    @Test("The base URL and path URLs point at the bound port")
    func urls() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        #expect(server.port != 0)
        #expect(server.baseURL.absoluteString == "http://127.0.0.1:\(server.port)")
        #expect(server.url(for: "/file.bin").absoluteString == "http://127.0.0.1:\(server.port)/file.bin")
        #expect(server.url(for: "/a b").absoluteString == "http://127.0.0.1:\(server.port)/a%20b")
    }
}
