import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Helper 89, attacking 4373f98 (a malformed answer to a segment costs that connection only, rule 17h) in the other
/// order: the server answers the plain GET with the whole file (200, strong ETag, `Accept-Ranges: bytes`) and every
/// range request with an answer that turns it away, but those answers arrive only after the first answer's own
/// connection was stopped at the end of its share. No connection is then left that could read on, the phase ends in
/// a retry, and the request for the rest (a range request again) meets the same answer and fails the download for
/// good, although that first answer carried the whole file and `--connections 1` finishes it. Rule 17i: a range
/// request turned away by a server that served the plain GET is asked once more without a range, and the whole file
/// is read again on one connection. Which of the two comes
/// first is a race in the field (the CLI against such a server fails every time with `--transport urlsession` and
/// usually finishes with libcurl); this test fixes the order: the range answers wait until the client has closed
/// the first answer's connection.
@Suite("Segments turned away after the first answer ended at its share (helper 89, rule 17i)")
struct SegmentTurnedAwayAfterFirstShareAttackTests {
    /// Far more than the socket buffers and URLSession's flow-control window hold together (about 13 MiB): the client
    /// can only take the whole file by reading it, so a first answer stopped at its share makes the send fail.
    static let total: Int64 = 32 << 20
    static let seed: UInt64 = 8902

    enum Refusal: String, CaseIterable, Sendable, CustomStringConvertible {
        case status2000
        case headerWithoutColon
        case forbidden
        var description: String { rawValue }

        var answer: [UInt8] {
            switch self {
            case .status2000: Array("HTTP/1.1 2000 Weird\r\nContent-Length: 0\r\n\r\n".utf8)
            case .headerWithoutColon:
                Array("HTTP/1.1 206 Partial Content\r\nBogus line\r\nContent-Length: 0\r\n\r\n".utf8)
            case .forbidden: Array("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n".utf8)
            }
        }
    }

    @Test(
        "fixed(4): every range request turned away only after the first answer stopped at its share: the first GET alone serves the file, and a second plain GET finishes it",
        arguments: Refusal.allCases, TransportKind.all)
    func turnedAwayAfterFirstShare(refusal: Refusal, transport: TransportKind) async throws {
        let content = testBytes(count: Int(Self.total), seed: Self.seed)
        let plainGets = Mutex(0)
        let rangeRequests = Mutex(0)
        // Signalled (many times) once the client closed the first answer's connection: it stopped reading at its share.
        let firstAnswerGone = DispatchSemaphore(value: 0)
        let firstAnswerLeft = Mutex(false)
        let server = try RawScriptServer { head, _, send in
            guard head.starts(with: Array("GET ".utf8)) else { return .completed(0) }
            if RawScriptServer.header("Range", in: head) != nil {
                rangeRequests.withLock { $0 += 1 }
                // Not a pause to hope in: the answer waits for the event, with the suite's deadline as a backstop.
                _ = firstAnswerGone.wait(timeout: .now() + .seconds(300))
                firstAnswerGone.signal()
                return send(refusal.answer) ? .completed(1) : .clientLeft(0)
            }
            plainGets.withLock { $0 += 1 }
            let head = RawScriptServer.head(
                "200 OK", ["Accept-Ranges: bytes", "Content-Length: \(Self.total)"],
                etag: Array("\"after-share-v1\"".utf8))
            // The whole file at once: the send fails once the client closed the connection at the end of its share.
            let sent = send(head + content)
            if !sent { firstAnswerLeft.withLock { $0 = true } }
            // Either way the range answers go now: one read to its end shows as `firstAnswerLeft` false below, at once.
            firstAnswerGone.signal()
            return sent ? .completed(200) : .clientLeft(0)
        }
        defer {
            firstAnswerGone.signal()
            server.stop()
        }
        let directory = try TemporaryDirectory()
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(4), events: events)
        configuration.transport = transport
        let task = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        let result = await task.result
        // The first GET, and the one that follows the turned-away range request for the rest (rule 17i).
        #expect(plainGets.withLock { $0 } == 2)
        // The order this test is about: the first answer was stopped at its share before any segment was answered.
        #expect(firstAnswerLeft.withLock { $0 }, "the first answer was read to its end")
        #expect(rangeRequests.withLock { $0 } <= 8, "range requests: \(rangeRequests.withLock { $0 })")
        switch result {
        case .success(let done):
            expectSameBytes((try? Data(contentsOf: done.fileURL)), Data(content))
        case .failure(let error):
            Issue.record(
                "the first GET carried the whole file and one connection finishes it, yet the download failed: \(error); range requests: \(rangeRequests.withLock { $0 })"
            )
        }
        #expect(directory.contents() == ["file.bin"], "no temporary file nor token left")
    }
}
