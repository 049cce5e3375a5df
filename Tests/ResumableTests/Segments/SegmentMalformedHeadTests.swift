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
            _ = release.wait(timeout: .now() + 60)
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
        let outcome = Task { await task.result }
        // How many segments started and failed. Under load the schedule may open fewer than three before the first
        // failure lowers the count; once every segment that started has failed, the count is down to the first
        // answer alone and no segment opens any more.
        let segments = {
            events.all.reduce(into: (started: 0, failed: 0)) { counts, event in
                if case .segmentStarted = event { counts.started += 1 }
                if case .segmentFailed = event { counts.failed += 1 }
            }
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            let (started, failed) = segments()
            if failed >= 1, failed == started { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        let (started, failed) = segments()
        #expect(failed >= 1 && failed == started, "segments started \(started), failed \(failed): \(events.all)")
        #expect(malformed.withLock { $0 } >= failed)
        // Every extra connection met the malformed answer; the download still runs on the first answer.
        #expect(!events.all.contains { if case .finished = $0 { return true } else { return false } })
        release.signal()
        let result = await outcome.value
        #expect(events.restarts.isEmpty, "restarts: \(events.restarts)")
        switch result {
        case .success(let done):
            #expect(try Data(contentsOf: done.fileURL) == Data(content))
        case .failure(let error):
            Issue.record("a download the first answer alone finishes failed: \(error)")
        }
    }
}
