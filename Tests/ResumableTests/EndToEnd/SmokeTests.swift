import Foundation
import LoopbackServer
import Synchronization
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
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
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

@Suite("Progress and events")
struct ProgressEventTests {
    final class Recorder: Sendable {
        let events = Mutex<[DownloadEvent]>([])
    }

    @Test("The event handler sees every event in order; late stream subscribers miss nothing but old progress")
    func eventHandlerAndReplay() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: 300_000)
        fixture.serve(.bytes(content))
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 100_000), for: "/file.bin")
        let recorder = Recorder()
        var configuration = DownloadFixture.configuration()
        configuration.eventHandler = { event in recorder.events.withLock { $0.append(event) } }
        let task = try fixture.download(configuration: configuration)
        let result = try await task.value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        let kinds = recorder.events.withLock { $0 }.map { event -> String in
            switch event {
            case .started: return "started"
            case .resumed(let offset, _): return "resumed \(offset)"
            case .retrying: return "retrying"
            case .finished: return "finished"
            default: return "other"
            }
        }.filter { $0 != "other" }
        #expect(kinds == ["started", "retrying", "resumed 100000", "finished"])

        var replayed: [String] = []
        for await event in task.events {
            if case .progress(let progress) = event {
                #expect(progress.bytesOnDisk == 300_000)
                #expect(progress.fractionCompleted == 1)
            } else if case .finished = event {
                replayed.append("finished")
            } else if case .started = event {
                replayed.append("started")
            }
        }
        #expect(replayed == ["started", "finished"], "a subscriber after the end still gets the history")
    }
}
