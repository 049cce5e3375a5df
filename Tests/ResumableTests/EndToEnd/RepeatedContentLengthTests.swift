import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// A `Content-Length` sent more than once (RFC 9110 §8.6, RFC 9112 §6.3): a list of identical valid values is that
/// one value; values that differ are refused.
@Suite("Repeated Content-Length")
struct RepeatedContentLengthTests {
    /// The `Content-Length` fields of each case: two identical fields (which URLSession merges into `100, 100`), one
    /// field holding the list, and three fields with spaces around the commas.
    static let identical: [[String]] = [["100", "100"], ["100, 100"], ["100", "100,100", " 100 "]]
    /// Values that differ, as fields of their own and as one list.
    static let differing: [[String]] = [["100", "101"], ["100, 101"], ["100", "100, 99"]]

    /// A 200 with the given `Content-Length` fields, a strong ETag and 100 bytes.
    static func answer(_ lengths: [String], body: [UInt8]) -> ScriptedResponse {
        ScriptedResponse(
            status: 200,
            headers: lengths.map { HeaderField("Content-Length", $0) } + [HeaderField("ETag", "\"v1\"")],
            body: body)
    }

    @Test(
        "A Content-Length repeated with the same value is that value: the exact bytes arrive",
        arguments: TransportKind.all, identical)
    func identicalValues(transport: TransportKind, lengths: [String]) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 100, seed: 42)
        fixture.server.enqueue(Self.answer(lengths, body: content), for: "/file.bin")
        let task = try fixture.download(configuration: DownloadFixture.configuration(retries: 0))
        let result = try await task.result.get()
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.server.requests(for: "/file.bin").count == 1)
    }

    @Test(
        "Content-Length values that differ are refused, and no file is finished",
        arguments: TransportKind.all, differing)
    func differingValues(transport: TransportKind, lengths: [String]) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 100, seed: 43)
        fixture.server.enqueue(Self.answer(lengths, body: content), for: "/file.bin")
        let task = try fixture.download(configuration: DownloadFixture.configuration(retries: 0))
        let error = try #require(await failure(of: task))
        #expect(error.code != .cancelled, "\(error)")
        #expect(!fixture.directory.contents().contains("file.bin"), "\(fixture.directory.contents())")
    }
}
