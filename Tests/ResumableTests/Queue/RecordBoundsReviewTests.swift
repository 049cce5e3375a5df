import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Review by helper 102 of a782d07 (server values over 1 KiB not kept, failures cut at 4 KiB, `TaskStore.write`
/// refuses a record over 1 MiB).
///
/// Tests named **FAILS on 9aae015** prove a break.
@Suite("Review of a782d07: what a task record holds")
struct RecordBoundsReviewTests {
    static let length = 100_000
    static let cut = 40_000

    /// **FAILS on 9aae015.** Rule 2 (nothing downloaded is lost without need) and rule 3 (outside data gets a clear,
    /// typed error up front): a782d07 bounds what a *server* puts into a record, but not what the *user* puts into
    /// the token that the record holds. A queue whose downloads send five request headers of 120,000 slashes each
    /// (a 600 KB request that curl sends; `DownloadTask` checks only the headers' syntax, and a token keeps every
    /// header that is not sensitive) is accepted, starts, and receives 40,000 bytes before the connection is cut.
    /// Its token encodes each `/` as `\/`: about 1.2 MB, so every checkpoint of its record fails in
    /// `TaskStore.write`'s new guard. The queue reports the download failed with a token (in memory, waiting for
    /// resume), but the record on disk is the one written before the first byte: no token. A later run (`restore()`,
    /// `resume --state`) finds nothing to resume, and the 40,000 bytes in `partial/` are lost (a store removes temporary files no record names).
    /// Nothing tells the user: the failure reads as an ordinary cut body. Either the headers are refused before
    /// anything is downloaded, or the record that reads back names the bytes.
    ///
    /// Likely cause: `Sources/Resumable/DownloadTask.swift:207` (`validatedHeaders`) bounds neither a value's length
    /// nor the headers' total, and `Sources/Resumable/Queue/TaskStore.swift:569` refuses only at the last line, after
    /// the bytes came in. Fix: refuse at `DownloadTask.init`, `resume(from:)` (merged headers) and queue start, with a
    /// typed `.invalidRequest`, headers whose encoded total passes a bound (say 64 KiB, as URLs), so that a token and
    /// a record can always be written once a download is taken.
    @Test("FAILS on 9aae015: user headers that would make a token over 1 MiB are refused before any request")
    func userHeadersKeepTheRecordResumable() async throws {
        let content = testBytes(count: Self.length, seed: 10_201)
        let server = try RawScriptServer { _, _ in
            RawScriptServer.head("200 OK", ["Content-Length: \(Self.length)"], etag: Array("\"v1\"".utf8))
                + Array(content[0..<Self.cut])
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let output = directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let state = directory.url.appendingPathComponent("state")
        var headers: [String: String] = [:]
        for index in 0..<5 { headers["X-Review-\(index)"] = String(repeating: "/", count: 120_000) }
        let store = try TaskStore(directory: state)
        let url = try #require(URL(string: "http://127.0.0.1:\(server.port)/file.bin"))
        var configuration = DownloadQueue.Configuration(
            download: DownloadFixture.configuration(retries: 0, headers: headers))
        // The failure stays in the queue (as in the CLI's batches) so that it can be read here.
        configuration.keepsFailuresForGood = true
        let queue = DownloadQueue(configuration: configuration, store: store)
        let id = try await queue.add(url, destination: .directory(output))
        _ = await queue.waitUntilIdle()
        // Refused with a clear, typed error before any request: no byte can come in that no token could describe.
        #expect(server.requests.isEmpty, "\(server.requests.count) requests were sent")
        let item = await queue.items.first { $0.id == id }
        guard case .failed(let error)? = item?.state else {
            Issue.record("the download did not fail: \(String(describing: item?.state))")
            return
        }
        #expect(error.code == .invalidRequest, "\(error)")
        #expect(error.message.contains("request headers of"), "\(error.message)")
        #expect(error.message.utf8.count < 300, "\(error.message.utf8.count) bytes")
    }
}
