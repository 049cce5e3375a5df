import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Minimal, deterministic reproductions of what the fault-injection soak found (run them with
/// `swift test --filter SoakFindingTests`).
///
/// Weak validators — a `W/` ETag, or a Last-Modified as recent as the Date — may stay the same when the content
/// changes: Apache marks an ETag weak exactly when the file changed within the last second, and a Last-Modified
/// has one-second granularity. RFC 9110 §15.3.7.3 allows combining partial responses only under the same strong
/// validator, and docs/protocol-rules.md rule 10 says the same.
@Suite("Fault-injection soak findings")
struct FaultSoakFindingTests {
    /// Downloads 20,000 of 50,000 bytes of `old`, replaces it with `new` under the same weak validators (as a
    /// server does when the file changes within a second), resumes through a token on disk, and returns the file.
    private func resumeAcrossAChange(etag: String?, lastModified: String?, date: String?) async throws -> String {
        let old = testBytes(count: 50_000, seed: 7)
        var new = old
        new[10_000] ^= 0xFF
        new[30_000] ^= 0xFF
        let server = try LoopbackServer()
        let directory = try TemporaryDirectory()
        server.register(.bytes(old, etag: etag, lastModified: lastModified, date: date), at: "/weak.bin")
        server.enqueue(behavior: Behavior(dropAfterBytes: 20_000), for: "/weak.bin")
        let configuration = DownloadTask.Configuration(
            retry: .init(maximumRetries: 0, initialDelay: .milliseconds(5), maximumDelay: .milliseconds(20)))
        let first = try DownloadTask(
            url: server.url(for: "/weak.bin"), destination: .directory(directory.url), configuration: configuration)
        guard case .failure(let error) = await first.result else { return "the cut first request finished" }
        let token = try #require(error.resumeToken)
        #expect(token.offset == 20_000)
        let file = directory.url.appendingPathComponent("token.json")
        try token.write(to: file)
        let decoded = try ResumeToken(contentsOf: file)
        try FileManager.default.removeItem(at: file)

        server.register(.bytes(new, etag: etag, lastModified: lastModified, date: date), at: "/weak.bin")
        let result = try await DownloadTask.resume(from: decoded, configuration: configuration).value
        let bytes = [UInt8](try Data(contentsOf: result.fileURL))
        if SoakBytes.equal(bytes, new) { return "the new version" }
        if SoakBytes.equal(bytes, Array(old[0..<20_000] + new[20_000...])) {
            return "a splice: 20,000 bytes of the old version, then the new one (joined at \(result.resumedAtOffset))"
        }
        return "neither version"
    }

    @Test("A weak ETag that stays the same while the content changes does not splice two versions")
    func weakETagUnchangedAcrossAChange() async throws {
        let outcome = try await resumeAcrossAChange(etag: "W/\"same\"", lastModified: nil, date: nil)
        #expect(outcome == "the new version")
    }

    @Test("A Last-Modified as recent as the Date that stays the same while the content changes does not splice")
    func weakLastModifiedUnchangedAcrossAChange() async throws {
        let modified = HTTPDate.format(Date())
        let outcome = try await resumeAcrossAChange(etag: nil, lastModified: modified, date: modified)
        #expect(outcome == "the new version")
    }
}
