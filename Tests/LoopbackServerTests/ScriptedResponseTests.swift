import Foundation
import LoopbackServer
import Testing

@Suite("Scripted responses and request recording")
struct ScriptedResponseTests {
    @Test("Scripted responses are sent raw and consumed first in, first out")
    func fifo() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes(Array("normal".utf8)), at: "/s")
        server.enqueue(
            ScriptedResponse(
                statusLine: "HTTP/1.1 206 Partial Content",
                headers: [HeaderField("Content-Range", "bytes 5-25/26"), HeaderField("Content-Length", "21")],
                body: Array("abcdef".utf8)),
            for: "/s")
        server.enqueue(ScriptedResponse(status: 404, headers: [HeaderField("X-Second", "1")]), for: "/s")
        let first = try RawHTTPClient.request(port: server.port, path: "/s")
        #expect(first.statusLine == "HTTP/1.1 206 Partial Content")
        #expect(first.headerNames == ["content-range", "content-length", "connection"])
        #expect(first.header("Connection") == "close")
        #expect(first.text == "abcdef")
        let second = try RawHTTPClient.request(port: server.port, path: "/s")
        #expect(second.statusLine == "HTTP/1.1 404 Not Found")
        #expect(second.header("X-Second") == "1")
        let third = try RawHTTPClient.request(port: server.port, path: "/s")
        #expect(third.status == 200)
        #expect(third.text == "normal")
    }

    @Test("A scripted response can cut its body and keeps its own Connection header")
    func closeAfterBodyBytes() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.enqueue(
            ScriptedResponse(
                status: 200, headers: [HeaderField("Content-Length", "26"), HeaderField("Connection", "Close")],
                body: Array("abcdefghijklmnopqrstuvwxyz".utf8), closeAfterBodyBytes: 5),
            for: "/cut")
        let response = try RawHTTPClient.request(port: server.port, path: "/cut")
        #expect(response.text == "abcde")
        #expect(response.headerNames == ["content-length", "connection"])
    }

    @Test("Scripted and behavior entries share one queue per path")
    func sharedQueue() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes([1, 2, 3]), at: "/q")
        server.enqueue(behavior: Behavior(status: 503), for: "/q")
        server.enqueue(ScriptedResponse(status: 410), for: "/q")
        server.enqueue(ScriptedResponse(status: 418), for: "/other")
        #expect(try RawHTTPClient.request(port: server.port, path: "/q").status == 503)
        #expect(try RawHTTPClient.request(port: server.port, path: "/q").status == 410)
        #expect(try RawHTTPClient.request(port: server.port, path: "/q").status == 200)
        #expect(try RawHTTPClient.request(port: server.port, path: "/other").status == 418)
    }

    @Test("Every request is recorded with method, target, path, query and headers")
    func recording() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes([1]), at: "/a.bin")
        _ = try RawHTTPClient.request(
            port: server.port, path: "/a.bin?x=1", headers: [("Range", "bytes=0-"), ("X-Custom", "v")])
        _ = try RawHTTPClient.request(port: server.port, method: "HEAD", path: "/b")
        let all = server.requests
        #expect(all.count == 2)
        let first = try #require(all.first)
        #expect(first.method == "GET")
        #expect(first.target == "/a.bin?x=1")
        #expect(first.path == "/a.bin")
        #expect(first.query == "x=1")
        #expect(first.header("range") == "bytes=0-")
        #expect(first.header("X-CUSTOM") == "v")
        #expect(first.header("Missing") == nil)
        #expect(first.headers.first?.name == "Host")
        #expect(server.requests(for: "/b").map(\.method) == ["HEAD"])
        #expect(await server.waitForRequests(count: 1, path: "/a.bin", timeout: .milliseconds(100)))
        #expect(!(await server.waitForRequests(count: 2, path: "/a.bin", timeout: .milliseconds(50))))
        server.clearRequests()
        #expect(server.requests.isEmpty)
    }

    @Test("waitForRequests returns once a request arrives from another thread")
    func waitForRequests() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let port = server.port
        let thread = Thread {
            usleep(50_000)
            _ = try? RawHTTPClient.request(port: port, path: "/later")
        }
        thread.start()
        #expect(await server.waitForRequests(count: 1, path: "/later", timeout: .seconds(60)))
    }

    @Test("Absolute-form targets are recorded with their path")
    func absoluteForm() throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes([9]), at: "/abs")
        let response = try RawHTTPClient.request(port: server.port, path: "http://127.0.0.1:\(server.port)/abs?q")
        #expect(response.body == [9])
        #expect(server.requests.first?.path == "/abs")
    }
}
