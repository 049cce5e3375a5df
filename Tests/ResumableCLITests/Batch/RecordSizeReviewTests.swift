import Foundation
import LoopbackServer
import Resumable
import Testing

/// Review by helper 101 of 9874b40 (URLs over 64 KiB refused so that a task record stays under the 1 MiB `TaskStore`
/// reads) through the real binary.
///
/// Tests named **FAILS on 9874b40** prove a break.
@Suite("Review of 9874b40: a task record's size")
struct RecordSizeReviewTests {
    static let length = 100_000
    static let cut = 40_000

    /// **FAILS on 9874b40.** Rule 2 (nothing downloaded is lost without need) and rule 3 (outside data is hostile):
    /// 9874b40 bounds URLs at 64 KiB so that "a URL that was taken is never one whose record or token could not be
    /// read back", but a record also holds what the server chose. A list URL of 60,000 bytes (taken) is fetched from a
    /// server whose first `200` carries an `ETag`, a `Last-Modified`, a `Date` and an `Accept-Ranges` of 74,000
    /// slashes each (valid values, under curl's 300 KiB for a whole head) and is cut after 40,000 bytes; every later
    /// answer is a `200` with `Content-Encoding: ` and 100,000 slashes. The task fails with its token (rule 2), and its
    /// record holds the token's four validators (each slash `\/` in JSON: 592 KB), the URL three times (360 KB) and
    /// the failure message, which quotes the whole Content-Encoding value (200 KB): 1,153,017 bytes. `TaskStore`
    /// refuses to read a record over 1 MiB, so `resume --state` skips it ("1 record unreadable") and the 40,000
    /// bytes in `partial/` are never resumed. The server alone brings 792 KB of it; a URL of 40 KB does the rest.
    ///
    /// Likely cause: `Sources/Resumable/Resume/ResumeStateMachine.swift:338` quotes a server's Content-Encoding whole
    /// in a message that records keep (so do `:267`, `:275`, `:297`, `:722`, `:732` with Content-Encoding and
    /// Content-Range values); `Sources/Resumable/Resume/Validators.swift:39-42` keeps validators of any length, and the
    /// Accept-Ranges value is kept whole too; nothing bounds a record when `TaskStore` writes it. Fix: quote server
    /// values through an excerpt (as `HTTPURL.excerpt` does for URLs); drop validators (and Accept-Ranges) longer than
    /// a small limit (say 1 KiB) as no validators; and check the encoded size where a record or token is written.
    @Test("FAILS on 9874b40: long server validators and a long quoted Content-Encoding: the task's record reads back")
    func serverTextKeepsTheRecordReadable() async throws {
        let content = Resource.generatedBytes(seed: 10_105, range: 0..<Int64(Self.length))
        let slashes = String(repeating: "/", count: 74_000)
        let server = try RawScriptServer { _, index in
            if index == 0 {
                let lines = [
                    "Last-Modified: \(slashes)", "Date: \(slashes)", "Accept-Ranges: \(slashes)",
                    "Content-Length: \(Self.length)",
                ]
                return RawScriptServer.head("200 OK", lines, etag: Array("\"\(slashes)\"".utf8))
                    + content[0..<Self.cut]
            }
            // Every later answer: a 200 whose Content-Encoding is 100,000 slashes.
            return RawScriptServer.head(
                "200 OK",
                ["Content-Length: \(Self.length)", "Content-Encoding: " + String(repeating: "/", count: 100_000)])
                + content
        }
        defer { server.stop() }
        let scratch = try ScratchDirectory()
        let url = "http://127.0.0.1:\(server.port)/file.bin#" + String(repeating: "/", count: 60_000)
        try Data((url + "\n").utf8).write(to: scratch.file("list.txt"))
        let first = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "--retries", "1", "-q"], in: scratch.url)
        #expect(first.exitCode != 0, "\(first)")
        // Every record of the store must be one TaskStore can read back.
        let state = scratch.url.appendingPathComponent("state")
        let files = FileManager.default.enumerator(atPath: state.path)?.compactMap { $0 as? String } ?? []
        for name in files where name.hasSuffix(".json") {
            let size = try FileManager.default.attributesOfItem(atPath: state.appendingPathComponent(name).path)[.size]
            #expect(((size as? NSNumber)?.intValue ?? 0) <= 1 << 20, "\(name): \(size ?? "?") bytes")
        }
        let resumed = try await CLIProcess.run(["resume", "--state", "state", "-q"], in: scratch.url)
        #expect(
            !resumed.stderr.contains("unreadable"),
            "resume --state could not read the record: \(resumed.stderr.prefix(400))"
        )
    }
}
