import Foundation
import Testing

@testable import Resumable

/// `finalName`: the free name a last token announces before its finished file is moved there (docs/resume-token.md).
@Suite("Token field finalName")
struct FinalNameTests {
    private static func token(offset: Int64 = 1 << 20, finalName: String?) -> ResumeToken {
        .sample(
            tempPath: "/tmp/out/" + TemporaryFileName.make(), offset: offset, destination: "/tmp/out/",
            finalName: finalName)
    }

    private static func object(_ token: ResumeToken) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: token.jsonData()) as? [String: Any])
    }

    private static func decoding(_ object: [String: Any]) throws -> ResumeToken {
        try ResumeToken(jsonData: JSONSerialization.data(withJSONObject: object))
    }

    @Test("Written only when there is one, and read back the same")
    func roundTrip() throws {
        #expect(try Self.object(Self.token(finalName: nil))["finalName"] == nil)
        let token = Self.token(finalName: "f (1).bin")
        #expect(try Self.object(token)["finalName"] as? String == "f (1).bin")
        #expect(try ResumeToken(jsonData: token.jsonData()) == token)
        #expect(try ResumeToken(jsonData: token.jsonData()).finalName == "f (1).bin")
    }

    @Test(
        "A name that is not a plain file name is refused: it could point a resume outside the directory",
        arguments: [
            "../f.bin", "a/b.bin", "/etc/passwd", "", "..", ".", "f\u{0}.bin", "dir/",
            ".resumable-0f8e6c2a-1b3d-4c5e-9f70-8192a3b4c5d6.partial",
        ])
    func unsafeNames(name: String) throws {
        var object = try Self.object(Self.token(finalName: nil))
        object["finalName"] = name
        let error = #expect(throws: ResumableError.self) { try Self.decoding(object) }
        #expect(error?.code == .invalidToken)
        #expect(error?.message.contains("finalName") == true, "\(String(describing: error))")
    }

    @Test(
        "A plain name of the caller's own is read back, leading dot and all",
        arguments: [".env (1)", "f (1).bin", " f.bin", "f\n.bin", "名前 (2).txt"])
    func plainNames(name: String) throws {
        var object = try Self.object(Self.token(finalName: nil))
        object["finalName"] = name
        #expect(try Self.decoding(object).finalName == name)
    }

    @Test("Only a token of a complete file has one, and it is a string")
    func onlyWhenComplete() throws {
        var object = try Self.object(Self.token(offset: 1000, finalName: nil))
        object["finalName"] = "f (1).bin"
        let incomplete = #expect(throws: ResumableError.self) { try Self.decoding(object) }
        #expect(incomplete?.code == .invalidToken)
        object = try Self.object(Self.token(finalName: nil))
        object["finalName"] = 7
        let wrongType = #expect(throws: ResumableError.self) { try Self.decoding(object) }
        #expect(wrongType?.code == .invalidToken)
    }
}
