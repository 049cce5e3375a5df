import Foundation
import LoopbackServer
import Testing

@testable import Resumable

@Suite("Downloads end to end")
struct DownloadTests {
    @Test(
        "A download streams the whole body into the destination under its suggested name", arguments: TransportKind.all)
    func fullDownload(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 300_000)
        fixture.serve(.bytes(content), at: "/data/archive.bin")
        let task = try fixture.download("/data/archive.bin")
        let result = try await task.value
        #expect(result.fileURL.lastPathComponent == "archive.bin")
        #expect(try fixture.contents(of: result.fileURL) == content)
        #expect(result.bytesOnDisk == 300_000)
        #expect(result.resumedAtOffset == 0)
        #expect(result.status == 200)
        #expect(result.transport == transport)
        #expect(fixture.temporaryFiles().isEmpty)
        let request = try #require(fixture.server.requests(for: "/data/archive.bin").first)
        #expect(request.header("Accept-Encoding") == "identity")
        #expect(request.header("Range") == nil)
    }
}
