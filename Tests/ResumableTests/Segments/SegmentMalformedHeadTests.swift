import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// A server that answers the first GET with the whole file (strong ETag, `Accept-Ranges: bytes`) and every range
/// request with a head too malformed to judge (`HTTP/1.1 2000 Weird`). Found by helper 85: the malformed answer to one
/// extra connection failed the whole multi-connection download, although the first answer was reading the file fine
/// and one connection finishes it.
@Suite("A malformed answer to a segment costs that connection only")
struct SegmentMalformedHeadTests {
    static let total: Int64 = 8 << 20
    static let seed: UInt64 = 8701

    @Test(
        "fixed(4): every segment answered with status 2000 while the first answer is held: it finishes the exact file",
        arguments: TransportKind.all)
    func malformedSegmentHeads(transport: TransportKind) async throws {
        let content = testBytes(count: Int(Self.total), seed: Self.seed)
        let malformed = Mutex(0)
        // The first answer stops after 1 MiB until the test has seen every segment fail, then sends the rest.
        let release = DispatchSemaphore(value: 0)
        let server = try RawScriptServer { head, _, send in
            guard head.starts(with: Array("GET ".utf8)) else { return .completed(0) }
            if RawScriptServer.header("Range", in: head) != nil {
                malformed.withLock { $0 += 1 }
                return send(Array("HTTP/1.1 2000 Weird\r\nContent-Length: 0\r\n\r\n".utf8))
                    ? .completed(2000) : .clientLeft(0)
            }
            let head = RawScriptServer.head(
                "200 OK", ["Accept-Ranges: bytes", "Content-Length: \(Self.total)"],
                etag: Array("\"malformed-v1\"".utf8))
            guard send(head + content[0..<(1 << 20)]) else { return .clientLeft(0) }
            _ = release.wait(timeout: .now() + .seconds(300))
            return send(Array(content[(1 << 20)...])) ? .completed(200) : .clientLeft(0)
        }
        defer {
            release.signal()
            server.stop()
        }
        let directory = try TemporaryDirectory()
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(4), events: events)
        configuration.transport = transport
        let task = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        let ended = Mutex(false)
        let outcome = Task {
            let result = await task.result
            ended.withLock { $0 = true }
            return result
        }
        let failedSegments = {
            events.all.count { event in
                if case .segmentFailed = event { return true }
                return false
            }
        }
        // A parallel run can keep the cooperative pool busy for many seconds: the suite's generous deadline, cut
        // short when the download ends first (as it did when one malformed answer failed it).
        _ = try await waitUntil { failedSegments() >= 3 || ended.withLock { $0 } }
        #expect(failedSegments() >= 3, "the segments did not fail: \(events.all)")
        #expect(malformed.withLock { $0 } >= 3)
        // Every extra connection met the malformed answer; the download still runs on the first answer.
        #expect(!events.all.contains { if case .finished = $0 { return true } else { return false } })
        release.signal()
        let result = await outcome.value
        #expect(events.restarts.isEmpty, "restarts: \(events.restarts)")
        switch result {
        case .success(let done):
            try expectSameBytes(Data(contentsOf: done.fileURL), Data(content))
        case .failure(let error):
            Issue.record("a download the first answer alone finishes failed: \(error)")
        }
    }
}
