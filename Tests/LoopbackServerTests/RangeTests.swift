import Foundation
import LoopbackServer
import Testing

@Suite("Range and If-Range")
struct RangeTests {
    let content = Resource.generatedBytes(seed: 11, range: 0..<1000)

    func makeServer() throws -> LoopbackServer {
        let server = try LoopbackServer()
        server.register(
            .bytes(content, etag: "\"strong\"", lastModified: "Wed, 21 Oct 2015 07:28:00 GMT"), at: "/f")
        return server
    }

    @Test("An open range request gets a 206 with the right Content-Range")
    func openRange() throws {
        let server = try makeServer()
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=100-")])
        #expect(response.statusLine == "HTTP/1.1 206 Partial Content")
        #expect(response.header("Content-Range") == "bytes 100-999/1000")
        #expect(response.header("Content-Length") == "900")
        #expect(response.header("ETag") == "\"strong\"")
        #expect(response.body == Array(content[100...]))
    }

    @Test("A closed range request gets exactly those bytes")
    func closedRange() throws {
        let server = try makeServer()
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=10-19")])
        #expect(response.status == 206)
        #expect(response.header("Content-Range") == "bytes 10-19/1000")
        #expect(response.body == Array(content[10...19]))
    }

    @Test("A suffix range gets the last bytes and a last position past the end is clamped")
    func suffixAndClamp() throws {
        let server = try makeServer()
        defer { server.shutdown() }
        let suffix = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=-100")])
        #expect(suffix.header("Content-Range") == "bytes 900-999/1000")
        #expect(suffix.body == Array(content[900...]))
        let bigSuffix = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=-5000")])
        #expect(bigSuffix.header("Content-Range") == "bytes 0-999/1000")
        let clamped = try RawHTTPClient.request(
            port: server.port, path: "/f", headers: [("Range", "bytes=990-99999999999999999999999")])
        #expect(clamped.header("Content-Range") == "bytes 990-999/1000")
        #expect(clamped.body == Array(content[990...]))
    }

    @Test("An unsatisfiable range gets 416 with Content-Range bytes */length")
    func unsatisfiable() throws {
        let server = try makeServer()
        defer { server.shutdown() }
        for range in ["bytes=1000-", "bytes=5000-6000", "bytes=-0", "bytes=99999999999999999999-"] {
            let response = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", range)])
            #expect(response.status == 416, "\(range)")
            #expect(response.header("Content-Range") == "bytes */1000", "\(range)")
            #expect(response.header("Content-Type") == "text/html")
        }
    }

    @Test("An invalid Range header is ignored and the whole body is sent")
    func invalidRangeIgnored() throws {
        let server = try makeServer()
        defer { server.shutdown() }
        for range in ["bytes=5-2", "items=0-1", "bytes=abc", "bytes=", "bytes 0-1", "bytes=1-2-3", "bytes=--1"] {
            let response = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", range)])
            #expect(response.status == 200, "\(range)")
            #expect(response.body.count == 1000)
        }
    }

    @Test("Multiple ranges get 200 with the whole body, or multipart/byteranges when asked")
    func multipleRanges() throws {
        let server = try makeServer()
        defer { server.shutdown() }
        let whole = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=0-1,5-6")])
        #expect(whole.status == 200)
        #expect(whole.body == content)

        server.enqueue(behavior: Behavior(multipartRanges: true), for: "/f")
        let multipart = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=10-")])
        #expect(multipart.status == 206)
        let contentType = try #require(multipart.header("Content-Type"))
        #expect(contentType.hasPrefix("multipart/byteranges; boundary="))
        #expect(multipart.header("Content-Range") == nil)
        #expect(multipart.header("Content-Length") == String(multipart.body.count))
        let boundary = String(contentType.split(separator: "=").last ?? "")
        let text = String(decoding: multipart.body, as: UTF8.self)
        #expect(text.hasPrefix("--\(boundary)\r\n"))
        #expect(text.contains("Content-Range: bytes 10-999/1000\r\n\r\n"))
        #expect(text.hasSuffix("\r\n--\(boundary)--\r\n"))
    }

    @Test("If-Range with the identical strong ETag gets 206, a different one gets 200")
    func ifRangeEntityTag() throws {
        let server = try makeServer()
        defer { server.shutdown() }
        let match = try RawHTTPClient.request(
            port: server.port, path: "/f", headers: [("Range", "bytes=500-"), ("If-Range", "\"strong\"")])
        #expect(match.status == 206)
        #expect(match.body == Array(content[500...]))
        let mismatch = try RawHTTPClient.request(
            port: server.port, path: "/f", headers: [("Range", "bytes=500-"), ("If-Range", "\"other\"")])
        #expect(mismatch.status == 200)
        #expect(mismatch.header("ETag") == "\"strong\"")
        #expect(mismatch.body == content)
    }

    @Test("A weak entity tag in If-Range never matches")
    func ifRangeWeak() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes(content, etag: "W/\"weak\""), at: "/w")
        server.register(.bytes(content, etag: "\"strong\""), at: "/s")
        let weakServer = try RawHTTPClient.request(
            port: server.port, path: "/w", headers: [("Range", "bytes=1-"), ("If-Range", "W/\"weak\"")])
        #expect(weakServer.status == 200)
        let weakRequest = try RawHTTPClient.request(
            port: server.port, path: "/s", headers: [("Range", "bytes=1-"), ("If-Range", "W/\"strong\"")])
        #expect(weakRequest.status == 200)
    }

    @Test("A date If-Range matches only the exact Last-Modified string")
    func ifRangeDate() throws {
        let server = try makeServer()
        defer { server.shutdown() }
        let match = try RawHTTPClient.request(
            port: server.port, path: "/f",
            headers: [("Range", "bytes=1-"), ("If-Range", "Wed, 21 Oct 2015 07:28:00 GMT")])
        #expect(match.status == 206)
        let mismatch = try RawHTTPClient.request(
            port: server.port, path: "/f",
            headers: [("Range", "bytes=1-"), ("If-Range", "Wed, 21 Oct 2015 07:28:01 GMT")])
        #expect(mismatch.status == 200)
    }

    @Test("If-Range without Range is ignored")
    func ifRangeWithoutRange() throws {
        let server = try makeServer()
        defer { server.shutdown() }
        let response = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("If-Range", "\"x\"")])
        #expect(response.status == 200)
        #expect(response.body == content)
    }

    @Test("A resource above 4 GiB answers ranges past 4 GiB with 64-bit offsets")
    func beyondFourGiB() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let length: Int64 = 5 << 30
        server.register(.generated(length: length, seed: 99), at: "/huge")
        let first: Int64 = 4_294_967_296
        let closed = try RawHTTPClient.request(
            port: server.port, path: "/huge", headers: [("Range", "bytes=\(first)-\(first + 4095)")])
        #expect(closed.status == 206)
        #expect(closed.header("Content-Range") == "bytes \(first)-\(first + 4095)/\(length)")
        expectSameBytes(closed.body, Resource.generatedBytes(seed: 99, range: first..<first + 4096))

        let open = try RawHTTPClient.headOnly(
            port: server.port,
            raw: RawHTTPClient.requestText(path: "/huge", headers: [("Range", "bytes=\(first)-")]))
        #expect(open.status == 206)
        #expect(open.header("Content-Range") == "bytes \(first)-\(length - 1)/\(length)")
        #expect(open.header("Content-Length") == String(length - first))

        let head = try RawHTTPClient.request(port: server.port, method: "HEAD", path: "/huge")
        #expect(head.header("Content-Length") == String(length))

        let tooFar = try RawHTTPClient.request(
            port: server.port, path: "/huge", headers: [("Range", "bytes=\(length)-")])
        #expect(tooFar.status == 416)
        #expect(tooFar.header("Content-Range") == "bytes */\(length)")
    }

    @Test("An empty resource answers any range with 416 bytes */0")
    func emptyResource() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes([]), at: "/empty")
        let whole = try RawHTTPClient.request(port: server.port, path: "/empty")
        #expect(whole.status == 200)
        #expect(whole.header("Content-Length") == "0")
        let ranged = try RawHTTPClient.request(port: server.port, path: "/empty", headers: [("Range", "bytes=0-")])
        #expect(ranged.status == 416)
        #expect(ranged.header("Content-Range") == "bytes */0")
    }
}
