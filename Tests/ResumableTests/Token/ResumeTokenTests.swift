import Foundation
import Testing

@testable import Resumable

@Suite("Resume token JSON")
struct ResumeTokenTests {
    struct InvalidCase: Decodable, CustomTestStringConvertible, Sendable {
        var file: String
        var code: String
        var field: String?
        var testDescription: String { file }
    }

    static let validFiles = [
        "minimal.json", "nulls-and-large-offset.json", "exact-file-destination.json", "with-expected-sha256.json",
        "with-ranges.json",
    ]
    static let invalidCases: [InvalidCase] =
        (try? Fixtures.decode([InvalidCase].self, from: "tokens/invalid/cases.json")) ?? []

    @Test("Valid fixture tokens decode and survive an encode/decode round trip", arguments: validFiles)
    func validTokensRoundTrip(file: String) throws {
        let data = try Data(contentsOf: Fixtures.url("tokens/valid/\(file)"))
        let token = try ResumeToken(jsonData: data)
        #expect(token.version == (token.completedRanges.isEmpty ? 1 : 2))
        let again = try ResumeToken(jsonData: token.jsonData())
        #expect(again == token)
    }

    @Test("The minimal fixture decodes to the values it holds")
    func minimalFixtureValues() throws {
        let token = try ResumeToken(jsonData: Data(contentsOf: Fixtures.url("tokens/valid/minimal.json")))
        #expect(token.url.absoluteString == "http://127.0.0.1:8080/files/archive.tar.gz")
        #expect(token.originalURL.absoluteString == "http://127.0.0.1:8080/latest")
        #expect(token.offset == 1_048_576)
        #expect(token.expectedLength == 4_194_304)
        #expect(token.etag == "\"5f3a-1c8e\"")
        #expect(token.lastModified == "Tue, 10 Nov 2026 08:12:31 GMT")
        #expect(token.destination == "/tmp/downloads/")
        #expect(token.suggestedFilename == "archive.tar.gz")
        #expect(ISO8601.format(token.updatedAt) == "2026-11-30T03:44:40.250Z")
    }

    @Test("Offsets above 4 GiB survive the JSON round trip")
    func largeOffsets() throws {
        let token = try ResumeToken(
            jsonData: Data(contentsOf: Fixtures.url("tokens/valid/nulls-and-large-offset.json"))
        )
        #expect(token.offset == 9_999_999_999)
        #expect(token.destination == nil)
        #expect(token.expectedLength == nil)
    }

    @Test("Invalid tokens are rejected with a typed error naming the field", arguments: invalidCases)
    func invalidTokensAreRejected(testCase: InvalidCase) throws {
        let data = try Data(contentsOf: Fixtures.url("tokens/invalid/\(testCase.file)"))
        let error = #expect(throws: ResumableError.self) { try ResumeToken(jsonData: data) }
        #expect(error?.code.description == testCase.code)
        if let field = testCase.field {
            #expect(error?.message.contains("'\(field)'") == true, "\(error?.message ?? "")")
        }
    }

    @Test("There are invalid token fixtures to test")
    func invalidFixturesExist() {
        #expect(Self.invalidCases.count >= 20)
    }

    @Test("Encoding writes every documented key, with null for absent values")
    func encodingWritesEveryKey() throws {
        let token = ResumeToken(
            url: URL(string: "http://127.0.0.1:1/a")!,
            originalURL: URL(string: "http://127.0.0.1:1/a")!,
            offset: 10,
            expectedLength: nil,
            etag: nil,
            lastModified: nil,
            responseDate: nil,
            acceptRanges: nil,
            tempPath: "/tmp/" + TemporaryFileName.make(),
            suggestedFilename: "a",
            destination: nil,
            headers: ["Authorization": "Bearer x", "Cookie": "c=1", "X-Trace": "1"],
            createdAt: Date(),
            updatedAt: Date()
        )
        let object = try #require(JSONSerialization.jsonObject(with: token.jsonData()) as? [String: Any])
        let documented: Set = [
            "version", "url", "originalURL", "offset", "expectedLength", "etag", "lastModified", "tempPath",
            "suggestedFilename", "destination", "expectedSHA256", "createdAt", "updatedAt",
        ]
        #expect(documented.isSubset(of: Set(object.keys)))
        #expect(object["expectedLength"] is NSNull)
        #expect(object["etag"] is NSNull)
        #expect(object["destination"] is NSNull)
        let headers = try #require(object["headers"] as? [String: String])
        #expect(headers == ["X-Trace": "1"], "credentials are never written into a token")
    }

    @Test("A token written to disk atomically reads back equal")
    func writeAndRead() throws {
        let directory = try TemporaryDirectory()
        let token = try ResumeToken(jsonData: Data(contentsOf: Fixtures.url("tokens/valid/minimal.json")))
        let file = directory.url.appendingPathComponent("t.json")
        try token.write(to: file)
        #expect(try ResumeToken(contentsOf: file) == token)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.url.path)
        #expect(leftovers == ["t.json"], "no sibling is left behind")
    }

    @Test("Reading a token file that does not exist says the download is finished or gone")
    func missingTokenFile() {
        let error = #expect(throws: ResumableError.self) {
            try ResumeToken(contentsOf: URL(fileURLWithPath: "/nonexistent/\(UUID()).json"))
        }
        #expect(error?.code == .tokenGone)
    }

    @Test("A huge file is refused as a token without being read whole")
    func hugeTokenFile() throws {
        let directory = try TemporaryDirectory()
        let file = directory.url.appendingPathComponent("huge.json")
        #expect(FileManager.default.createFile(atPath: file.path, contents: nil))
        try FileHandle(forWritingTo: file).truncate(atOffset: 64 << 20)
        let error = #expect(throws: ResumableError.self) { try ResumeToken(contentsOf: file) }
        #expect(error?.code == .invalidToken)
        #expect(error?.message.contains("too large") == true)
    }

    @Test("Temporary file names are recognized only in the library's exact form")
    func temporaryFileNames() {
        let name = TemporaryFileName.make()
        #expect(TemporaryFileName.isValid(name))
        #expect(!TemporaryFileName.isValid("passwd"))
        #expect(!TemporaryFileName.isValid(".resumable-../../x.partial"))
        #expect(!TemporaryFileName.isValid(name + ".x"))
    }
}
