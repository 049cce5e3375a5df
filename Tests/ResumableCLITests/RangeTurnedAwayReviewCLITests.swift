import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Review of rule 17i through the real binary: the plain GET sent after a range request was turned away is answered
/// with a 206 of the whole file; `get` fails, and `resume` of its token must never finish a splice.
@Suite("Review: rule 17i's plain GET answered 206, through the CLI")
struct RangeTurnedAwayReviewCLITests {
    @Test(
        "get (range turned away, plain GET answered 206 from byte 0) then resume: the file is the server's or none",
        arguments: ["1", "4"])
    func getThenResume(connections: String) async throws {
        let length = 100_000
        let cut = 40_000
        let content = Resource.generatedBytes(seed: 935, range: 0..<Int64(length))
        let tag = Array("\"v1\"".utf8)
        // 0: a 200 cut at 40,000; 1: the range request, 403; 2: the plain GET, a 206 `bytes 0-99999/100000` of the
        // whole file; from 3 on (the resume) range requests are honored.
        let server = try RawScriptServer { head, index in
            if index == 0 {
                return RawScriptServer.head(
                    "200 OK", ["Accept-Ranges: bytes", "Content-Length: \(length)"], etag: tag) + content[0..<cut]
            }
            guard let range = RawScriptServer.header("Range", in: head) else {
                return RawScriptServer.head(
                    "206 Partial Content",
                    ["Content-Range: bytes 0-\(length - 1)/\(length)", "Content-Length: \(length)"], etag: tag)
                    + content
            }
            guard index >= 3 else {
                return Array("HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".utf8)
            }
            let text = String(decoding: range, as: UTF8.self)
            let from = Int(text.dropFirst("bytes=".count).split(separator: "-").first ?? "0") ?? 0
            return RawScriptServer.head(
                "206 Partial Content",
                ["Content-Range: bytes \(from)-\(length - 1)/\(length)", "Content-Length: \(length - from)"], etag: tag)
                + content[from...]
        }
        defer { server.stop() }
        let scratch = try ScratchDirectory()
        let get = try await CLIProcess.run(
            ["get", "http://127.0.0.1:\(server.port)/file.bin", "--connections", connections], in: scratch.url)
        if get.exitCode == 0 {
            let exact = try Data(contentsOf: scratch.file("file.bin")) == Data(content)
            #expect(exact, "get saved a file that is not the server's")
            return
        }
        let tokenPath = scratch.file("file.bin.resumable.json").path
        #expect(FileManager.default.fileExists(atPath: tokenPath), "\(get)")
        let resumed = try await CLIProcess.run(["resume", tokenPath], in: scratch.url)
        if resumed.exitCode == 0 {
            let exact = try Data(contentsOf: scratch.file("file.bin")) == Data(content)
            #expect(exact, "resume saved a file that is not the server's; get: \(get.description)")
        }
    }
}
