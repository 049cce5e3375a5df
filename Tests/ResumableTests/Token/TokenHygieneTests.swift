import Foundation
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What a token file may hold and how it is read and written: modes, size caps, credentials.
@Suite("Token hygiene", .timeLimit(.minutes(5)))
struct TokenHygieneTests {
    private static func token(
        url: String = "http://127.0.0.1:1/a",
        originalURL: String? = nil,
        headers: [String: String] = [:],
        extraSensitive: Set<String> = []
    ) -> ResumeToken {
        ResumeToken(
            url: URL(string: url)!,
            originalURL: URL(string: originalURL ?? url)!,
            offset: 10,
            expectedLength: 100,
            etag: "\"e\"",
            lastModified: nil,
            responseDate: nil,
            acceptRanges: nil,
            tempPath: "/tmp/" + TemporaryFileName.make(),
            suggestedFilename: "a",
            destination: nil,
            headers: headers,
            extraSensitive: extraSensitive,
            createdAt: Date(),
            updatedAt: Date()
        )
    }

    private static func mode(_ path: String) throws -> Int {
        var status = stat()
        try #require(lstat(path, &status) == 0, "lstat \(path): errno \(errno)")
        return Int(status.st_mode & 0o7777)
    }

    // MARK: - Mode

    @Test("A token file is written with mode 0600")
    func tokenFileMode() throws {
        let directory = try TemporaryDirectory()
        let file = directory.url.appendingPathComponent("t.json")
        try Self.token().write(to: file)
        #expect(try Self.mode(file.path) == 0o600)
        try Self.token().write(to: file)
        #expect(try Self.mode(file.path) == 0o600, "rewriting keeps it")
    }

    @Test("A leftover 0644 sibling and a 0644 token are replaced by a 0600 token")
    func leftoversDoNotWidenTheMode() throws {
        let directory = try TemporaryDirectory()
        let file = directory.url.appendingPathComponent("t.json")
        let sibling = file.path + ".writing"
        #expect(FileManager.default.createFile(atPath: file.path, contents: Data("{}".utf8)))
        #expect(FileManager.default.createFile(atPath: sibling, contents: Data("partial".utf8)))
        chmod(file.path, 0o644)
        chmod(sibling, 0o644)
        try Self.token().write(to: file)
        #expect(try Self.mode(file.path) == 0o600)
        #expect(directory.contents() == ["t.json"])
    }

    @Test("A token file made read-only by its owner stays read-only when rewritten")
    func narrowerModeIsKept() throws {
        let directory = try TemporaryDirectory()
        let file = directory.url.appendingPathComponent("t.json")
        try Self.token().write(to: file)
        chmod(file.path, 0o400)
        let newer = Self.token(url: "http://127.0.0.1:1/b")
        try newer.write(to: file)
        #expect(try Self.mode(file.path) == 0o400)
        #expect(try ResumeToken(contentsOf: file) == newer)
    }

    @Test("A leftover sibling that is a hard link to another file is not written through")
    func hardLinkedSiblingIsNotTruncated() throws {
        let directory = try TemporaryDirectory()
        let file = directory.url.appendingPathComponent("t.json")
        let other = directory.url.appendingPathComponent("other")
        try Data("keep me".utf8).write(to: other)
        #expect(link(other.path, file.path + ".writing") == 0)
        try Self.token().write(to: file)
        try expectSameBytes(Data(contentsOf: other), Data("keep me".utf8))
        #expect(try ResumeToken(contentsOf: file).offset == 10)
    }

    // MARK: - Reading safely

    /// Bytes this process passed to read(2) so far, from /proc/self/io; nil where there is none.
    private static func bytesRead() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/io", encoding: .utf8) else { return nil }
        let line = text.split(separator: "\n").first { $0.hasPrefix("rchar:") }
        return line.flatMap { Int($0.dropFirst("rchar:".count).trimmingCharacters(in: .whitespaces)) }
    }

    @Test("A symbolic link to a 300 MB sparse file is refused as too large without reading it")
    func symlinkToHugeSparseFile() throws {
        let directory = try TemporaryDirectory()
        let huge = directory.url.appendingPathComponent("huge")
        let descriptor = open(huge.path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        try #require(descriptor >= 0)
        #expect(ftruncate(descriptor, 300 << 20) == 0)
        close(descriptor)
        let link = directory.url.appendingPathComponent("t.json")
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: huge.path)

        let before = Self.bytesRead()
        let error = #expect(throws: ResumableError.self) { try ResumeToken(contentsOf: link) }
        #expect(error?.code == .invalidToken)
        #expect(error?.message.contains("too large") == true, "\(error?.message ?? "")")
        if let before, let after = Self.bytesRead() {
            #expect(after - before < 100 << 20, "the file was read: \(after - before) bytes")
        }
    }

    @Test("A FIFO is refused at once, without waiting for a writer")
    func fifoIsRefused() throws {
        let directory = try TemporaryDirectory()
        let fifo = directory.url.appendingPathComponent("t.json")
        try #require(mkfifo(fifo.path, 0o600) == 0)
        let error = #expect(throws: ResumableError.self) { try ResumeToken(contentsOf: fifo) }
        #expect(error?.code == .invalidToken)
        #expect(error?.message.contains("not a regular file") == true, "\(error?.message ?? "")")
    }

    @Test("/dev/zero, a link to it, and a directory are refused as not regular files")
    func devicesAndDirectoriesAreRefused() throws {
        let directory = try TemporaryDirectory()
        let link = directory.url.appendingPathComponent("t.json")
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: "/dev/zero")
        for path in ["/dev/zero", link.path, directory.path] {
            let error = #expect(throws: ResumableError.self) {
                try ResumeToken(contentsOf: URL(fileURLWithPath: path))
            }
            #expect(error?.code == .invalidToken, "\(path)")
            #expect(error?.message.contains("not a regular file") == true, "\(error?.message ?? "")")
        }
    }

    @Test("A dangling link or a missing directory says the token is gone")
    func missingTargetsAreGone() throws {
        let directory = try TemporaryDirectory()
        let link = directory.url.appendingPathComponent("t.json")
        try FileManager.default.createSymbolicLink(
            atPath: link.path, withDestinationPath: directory.url.appendingPathComponent("nothing").path)
        let notADirectory = directory.url.appendingPathComponent("file")
        try Data().write(to: notADirectory)
        for url in [link, notADirectory.appendingPathComponent("t.json")] {
            let error = #expect(throws: ResumableError.self) { try ResumeToken(contentsOf: url) }
            #expect(error?.code == .tokenGone, "\(url.path)")
        }
    }

    @Test("A token file at exactly the cap is read; one byte more is refused")
    func sizeCapBoundary() throws {
        let directory = try TemporaryDirectory()
        let file = directory.url.appendingPathComponent("t.json")
        var json = Self.token().jsonData()
        json.append(Data(repeating: 0x20, count: ResumeToken.maximumFileSize - json.count))
        try json.write(to: file)
        #expect(try ResumeToken(contentsOf: file).offset == 10)
        json.append(0x20)
        try json.write(to: file)
        let error = #expect(throws: ResumableError.self) { try ResumeToken(contentsOf: file) }
        #expect(error?.message.contains("too large") == true)
    }

    // MARK: - URL user information

    @Test(
        "User information is removed from a URL, and only from its authority",
        arguments: [
            ("https://ada:hunter2@host.example:8443/a?b@c#d@e", "https://host.example:8443/a?b@c#d@e"),
            ("http://token@127.0.0.1/file", "http://127.0.0.1/file"),
            ("http://@127.0.0.1/file", "http://127.0.0.1/file"),
            ("http://127.0.0.1/path@x?q=@", "http://127.0.0.1/path@x?q=@"),
            ("http://[::1]:8080/a", "http://[::1]:8080/a"),
        ])
    func userInfoIsRemoved(input: String, expected: String) throws {
        let url = try #require(URL(string: input))
        let stripped = HTTPURL.removingUserInfo(url)
        #expect(stripped.absoluteString == expected)
        #expect(!HTTPURL.hasUserInfo(stripped))
    }

    @Test("A token never stores user:password@ from its URLs")
    func tokenStripsUserInfo() throws {
        let token = Self.token(
            url: "https://ada:hunter2@cdn.example/files/a.bin?sig=1",
            originalURL: "https://ada:hunter2@downloads.example/latest")
        #expect(token.url.absoluteString == "https://cdn.example/files/a.bin?sig=1")
        #expect(token.originalURL.absoluteString == "https://downloads.example/latest")
        let json = String(decoding: token.jsonData(), as: UTF8.self)
        // Not `ada` alone: the temporary file's random UUID may hold those three hex digits (one run in ~150 did).
        #expect(!json.contains("hunter2") && !json.contains("ada:") && !json.contains("ada@"))
        #expect(try ResumeToken(jsonData: token.jsonData()) == token)
    }

    @Test("A decoded token with user information is refused without repeating the password")
    func decodedUserInfoIsRefused() throws {
        var object = try #require(
            try JSONSerialization.jsonObject(with: Self.token().jsonData()) as? [String: Any])
        object["originalURL"] = "http://ada:hunter2@127.0.0.1:1/a"
        let data = try JSONSerialization.data(withJSONObject: object)
        let error = #expect(throws: ResumableError.self) { try ResumeToken(jsonData: data) }
        #expect(error?.code == .invalidToken)
        #expect(error?.message.contains("'originalURL'") == true)
        #expect(error?.message.contains("hunter2") == false, "\(error?.message ?? "")")
    }

    // MARK: - Sensitive headers

    @Test(
        "Credential headers are recognized by the default rule, in any case",
        arguments: [
            "Authorization", "proxy-authorization", "Cookie", "X-Api-Key", "x-apikey", "X-API_KEY", "api-key",
            "X-Auth-Token", "X-Amz-Security-Token", "X-Goog-Api-Key", "Ocp-Apim-Subscription-Key", "X-CSRF-Token",
            "X-XSRF-TOKEN", "X-Session-Id", "X-Client-Secret", "X-Password", "X-Amz-Signature", "X-Credential",
            "X-Amz-Server-Side-Encryption-Customer-Key", "DPoP", "X-JWT-Assertion", "Private-Token",
        ])
    func credentialHeaders(name: String) {
        #expect(SensitiveHeaders.contains(name))
        #expect(SensitiveHeaders.contains(name, extra: []))
    }

    @Test(
        "Ordinary headers are not credentials",
        arguments: [
            "Accept", "Accept-Language", "User-Agent", "X-Trace", "X-Request-Id", "If-None-Match", "Referer",
            "Cache-Control", "X-Client", "DNT", "X-Forwarded-For",
        ])
    func ordinaryHeaders(name: String) {
        #expect(!SensitiveHeaders.contains(name))
        #expect(!SensitiveHeaders.contains(name, extra: ["x-other"]))
    }

    @Test("Extra sensitive names match case-insensitively, both ways")
    func extraNames() {
        #expect(SensitiveHeaders.contains("X-Tenant", extra: ["x-tenant"]))
        #expect(SensitiveHeaders.contains("x-tenant", extra: ["X-TENANT"]))
        #expect(!SensitiveHeaders.contains("X-Tenant-Region", extra: ["x-tenant"]), "exact names, not fragments")
        #expect(SensitiveHeaders.contains("Authorization", extra: ["x-tenant"]), "the default rule still applies")
    }

    @Test("A token never stores X-Api-Key, cloud tokens or configured extra names")
    func tokenDropsSensitiveHeaders() throws {
        let token = Self.token(
            headers: [
                "X-Api-Key": "k", "X-Amz-Security-Token": "t", "x-tenant": "acme", "X-Trace": "1",
                "Accept": "*/*",
            ],
            extraSensitive: ["X-Tenant"])
        #expect(token.headers == ["X-Trace": "1", "Accept": "*/*"])
        let json = String(decoding: token.jsonData(), as: UTF8.self)
        #expect(!json.contains("X-Api-Key") && !json.contains("acme"))
        #expect(try ResumeToken(jsonData: token.jsonData()).headers == token.headers)
    }
}
