import Foundation
import LoopbackServer
import Testing

@Suite("Static file serving")
struct StaticFileTests {
    /// A fresh directory with `file.bin` (3000 bytes) and `sub/inner.txt`.
    func makeDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("loopback-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(
            at: directory.appendingPathComponent("sub"), withIntermediateDirectories: true)
        try Data(Resource.generatedBytes(seed: 1, range: 0..<3000)).write(
            to: directory.appendingPathComponent("file.bin"))
        try Data("inner".utf8).write(to: directory.appendingPathComponent("sub/inner file.txt"))
        return directory
    }

    @Test("Files under the directory are served with a size-mtime-inode ETag and ranges")
    func servesFiles() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.serveFiles(from: directory)
        let expected = Resource.generatedBytes(seed: 1, range: 0..<3000)
        let whole = try RawHTTPClient.request(port: server.port, path: "/file.bin")
        #expect(whole.status == 200)
        expectSameBytes(whole.body, expected)
        #expect(whole.header("Content-Type") == "application/octet-stream")
        #expect(whole.header("Last-Modified")?.hasSuffix(" GMT") == true)
        let etag = try #require(whole.header("ETag"))
        let fields = etag.dropFirst().dropLast().split(separator: "-")
        #expect(etag.hasPrefix("\"") && fields.count == 3)
        #expect(fields.first == "bb8")

        let ranged = try RawHTTPClient.request(
            port: server.port, path: "/file.bin", headers: [("Range", "bytes=2000-"), ("If-Range", etag)])
        #expect(ranged.status == 206)
        #expect(ranged.header("Content-Range") == "bytes 2000-2999/3000")
        expectSameBytes(ranged.body, Array(expected[2000...]))

        let inner = try RawHTTPClient.request(port: server.port, path: "/sub/inner%20file.txt")
        #expect(inner.text == "inner")
    }

    @Test("Paths with .. are rejected and missing files or directories get 404")
    func rejectsTraversal() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.serveFiles(from: directory.appendingPathComponent("sub"))
        for path in ["/../file.bin", "/%2e%2e/file.bin", "/%2E%2E%2Ffile.bin", "/a/../../file.bin", "/%zz"] {
            let response = try RawHTTPClient.request(port: server.port, path: path)
            #expect(response.status == 403, "\(path)")
            #expect(!response.text.contains("inner"))
        }
        #expect(try RawHTTPClient.request(port: server.port, path: "/nope").status == 404)
        #expect(try RawHTTPClient.request(port: server.port, path: "/").status == 404)
        #expect(try RawHTTPClient.request(port: server.port, path: "/%00").status == 403)
    }

    @Test("A symbolic link leading out of the directory is refused")
    func rejectsEscapingSymlink() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createSymbolicLink(
            at: directory.appendingPathComponent("sub/escape"),
            withDestinationURL: directory.appendingPathComponent("file.bin"))
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.serveFiles(from: directory.appendingPathComponent("sub"))
        #expect(try RawHTTPClient.request(port: server.port, path: "/escape").status == 403)
    }

    /// `resumable serve DIR` is run over download directories, which hold a batch's `.resumable-state` (tokens
    /// with absolute paths) and whatever dotfiles are there; none of them may be served.
    @Test("Hidden files, hidden directories and links into them get 404; other files are still served")
    func hidesDotfiles() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let secret = Data("secret".utf8)
        let fileManager = FileManager.default
        try fileManager.createDirectory(
            at: directory.appendingPathComponent("sub/.x"), withIntermediateDirectories: true)
        try fileManager.createDirectory(
            at: directory.appendingPathComponent(".resumable-state"), withIntermediateDirectories: true)
        for name in [".hidden", "sub/.x/file", ".resumable-state/a.bin.resumable.json"] {
            try secret.write(to: directory.appendingPathComponent(name))
        }
        try Data("token".utf8).write(to: directory.appendingPathComponent("a.bin.resumable.json"))
        try fileManager.createSymbolicLink(
            atPath: directory.appendingPathComponent("link").path,
            withDestinationPath: ".resumable-state/a.bin.resumable.json")
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.serveFiles(from: directory)
        let hidden = [
            "/.hidden", "/sub/.x/file", "/.resumable-state/a.bin.resumable.json", "/%2Ehidden", "/sub/%2ex/file",
            "/./.hidden", "//.hidden", "/link", "/.hidden?x=1",
        ]
        for path in hidden {
            let response = try RawHTTPClient.request(port: server.port, path: path)
            #expect(response.status == 404, "\(path)")
            #expect(response.body != Array(secret), "\(path)")
            #expect(try RawHTTPClient.request(port: server.port, method: "HEAD", path: path).status == 404, "\(path)")
        }
        try expectSameBytes(
            RawHTTPClient.request(port: server.port, path: "/file.bin").body,
            Resource.generatedBytes(seed: 1, range: 0..<3000))
        #expect(try RawHTTPClient.request(port: server.port, path: "/a.bin.resumable.json").text == "token")
        #expect(try RawHTTPClient.request(port: server.port, path: "/./file.bin").status == 200)
    }

    @Test("A registered file resource serves the file's current content")
    func fileResource() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let resource = Resource(body: .file(directory.appendingPathComponent("file.bin")))
        #expect(resource.length == 3000)
        #expect(resource.byte(at: 7) == Resource.generatedByte(seed: 1, offset: 7))
        server.register(resource, at: "/reg")
        let response = try RawHTTPClient.request(port: server.port, path: "/reg", headers: [("Range", "bytes=-10")])
        #expect(response.status == 206)
        expectSameBytes(response.body, Resource.generatedBytes(seed: 1, range: 2990..<3000))
        #expect(response.header("ETag") == resource.etag)
    }
}
