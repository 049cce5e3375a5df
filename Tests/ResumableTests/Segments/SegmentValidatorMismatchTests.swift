import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// A server whose first answer has a strong Last-Modified date and no ETag, and whose 206s (under a matching
/// `If-Range` date) add an ETag: no validator differs, none confirms the file for a segment either. Such a 206 is not
/// written, and it is not a changed file inside the multi-connection phase: before, every phase ended in a restart
/// and the download failed after ten. The file never changes.
final class SegmentValidatorMismatchServer: Sendable {
    static let total: Int64 = 8 << 20
    static let seed: UInt64 = 8601
    static let lastModified = "Mon, 01 Jan 2024 00:00:00 GMT"

    private final class Counts: Sendable {
        let value = Mutex((file: 0, partial: 0))
    }

    let raw: RawScriptServer
    private let counts = Counts()

    init() throws {
        let content = testBytes(count: Int(Self.total), seed: Self.seed)
        let counts = counts
        raw = try RawScriptServer { head, _, send in
            guard head.starts(with: Array("GET ".utf8)) else { return .completed(0) }
            let validators = ["Last-Modified: \(Self.lastModified)", "Date: Tue, 02 Jan 2024 00:00:00 GMT"]
            if let range = RawScriptServer.header("Range", in: head).map({ String(decoding: $0, as: UTF8.self) }) {
                let ifRange = RawScriptServer.header("If-Range", in: head).map {
                    String(decoding: $0, as: UTF8.self)
                }
                let parts = range.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false)
                if ifRange == Self.lastModified, range.hasPrefix("bytes="), parts.count == 2,
                    let first = Int64(parts[0]), first < Self.total
                {
                    let last = min(Int64(parts[1]) ?? (Self.total - 1), Self.total - 1)
                    counts.value.withLock { $0.partial += 1 }
                    let response =
                        RawScriptServer.head(
                            "206 Partial Content",
                            validators + [
                                "Accept-Ranges: bytes", "Content-Range: bytes \(first)-\(last)/\(Self.total)",
                                "Content-Length: \(last - first + 1)",
                            ], etag: Array("\"added-later\"".utf8)) + Array(content[Int(first)...Int(last)])
                    return send(response) ? .completed(206) : .clientLeft(0)
                }
            }
            counts.value.withLock { $0.file += 1 }
            let response =
                RawScriptServer.head(
                    "200 OK", validators + ["Accept-Ranges: bytes", "Content-Length: \(Self.total)"])
                + content
            return send(response) ? .completed(200) : .clientLeft(0)
        }
    }

    var url: URL { URL(string: "http://127.0.0.1:\(raw.port)/file.bin")! }
    var fileAnswers: Int { counts.value.withLock { $0.file } }
    var rangeAnswers: Int { counts.value.withLock { $0.partial } }

    deinit { raw.stop() }
}

@Suite("Segments whose 206s add a validator the first answer did not have")
struct SegmentValidatorMismatchTests {
    /// The segments are not joined; the phase ends and one connection goes on. Its resume judges the same 206 by the
    /// single-connection rule, which takes a validator the stored ones lack for another version: one restart, then
    /// the whole file from one connection (segments are not tried again in this task). Not ten restarts and a failure.
    @Test(
        "fixed(4): the exact file, at most one restart, where every phase used to restart", arguments: TransportKind.all
    )
    func addedETag(transport: TransportKind) async throws {
        let server = try SegmentValidatorMismatchServer()
        let directory = try TemporaryDirectory()
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(4), events: events)
        configuration.transport = transport
        let task = try DownloadTask(
            url: server.url, destination: .directory(directory.url), configuration: configuration)
        let result = await task.result
        #expect(events.restarts.count <= 1, "restarts: \(events.restarts)")
        #expect(server.fileAnswers <= 2, "the whole file was sent \(server.fileAnswers) times")
        #expect(server.rangeAnswers >= 1, "no segment was asked: the test shows nothing")
        switch result {
        case .success(let done):
            #expect(
                try Data(contentsOf: done.fileURL)
                    == Data(
                        testBytes(
                            count: Int(SegmentValidatorMismatchServer.total), seed: SegmentValidatorMismatchServer.seed)
                    ))
        case .failure(let error):
            Issue.record("a download one connection finishes failed with four: \(error)")
        }
    }
}
