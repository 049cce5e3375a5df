import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Adversarial review (helper 87) of 07bbfbd (`ResumeStateMachine.partialsNeedValidators`), against a
/// ``ValidatorlessCacheServer`` whose second 200 (the restart in one piece that 07bbfbd ordered) holds after its first
/// MiB until the test releases it.
@Suite("Attack: partialsNeedValidators is forgotten by a pause and resume")
struct ValidatorlessPauseResumeAttackTests {
    /// Rule 1: never splice two versions. fixed(4): the segments' validator-less 206s set `partialsNeedValidators`,
    /// the one connection's resume is refused and the download starts again from byte 0 (one restart). It is paused
    /// (`cancelProducingResumeData`) with the first MiB of version 1 on disk, and resumed from that token with one
    /// connection, as a new process (`resumable resume`, a store resumed after a kill) does. The new task's
    /// `ResumeStateMachine` starts with `partialsNeedValidators == false`: its Range under If-Range gets the same
    /// validator-less 206 of version 2, which is joined. Observed (both transports, every run): success, resumedAtOffset 1 MiB, no restart, the file is
    /// version 1 up to 1 MiB and version 2 after. (Resumed with fixed(4) it depends on timing whether a segment's 206
    /// sets the flag again before the first connection's body ends.)
    /// Cause: the flag lives only in memory (`ResumeStateMachine.swift:114`); the token does not carry it, so the
    /// evidence that this server's If-Range cannot be trusted is lost at every pause, kill or restart of a process.
    @Test(
        "fixed(4), paused after its restart, resumed with one connection: never a file of two versions",
        arguments: TransportKind.all)
    func pauseAndResume(transport: TransportKind) async throws {
        let server = try ValidatorlessCacheServer(
            seeds: (8790, 8791), etag: "\"pause-v1\"", holdingSecondWhole: true)
        let directory = try TemporaryDirectory()
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(4), events: events)
        configuration.transport = transport
        let task = try DownloadTask(
            url: server.url, destination: .directory(directory.url), configuration: configuration)
        // Wait (for events) until the restart in one piece has written the first MiB the server sends before holding:
        // a restart reported, and the temporary file exactly 1 MiB long (the download before the restart had more).
        _ = try await waitUntil {
            let restarted = events.all.contains { if case .restarted = $0 { true } else { false } }
            let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.url.path)) ?? []
            let sizes = names.filter { TemporaryFileName.isValid($0) }.compactMap {
                try? FileManager.default.attributesOfItem(atPath: directory.url.appendingPathComponent($0).path)[.size]
                    as? Int64
            }
            return restarted && sizes.contains(1 << 20)
        }
        #expect(events.restarts.count == 1, "restarts: \(events.restarts)")
        let paused = await task.cancelProducingResumeData()
        server.release()
        let token = try #require(paused)
        #expect(token.offset == 1 << 20)
        var again = Segmented.configuration(.fixed(1))
        again.transport = transport
        let resumed = try DownloadTask.resume(from: token, configuration: again)
        let result = await resumed.result
        switch result {
        case .success(let done):
            let splice = server.splice(in: Array(try Data(contentsOf: done.fileURL)))
            #expect(splice == nil, "spliced: \(splice ?? "")")
        case .failure(let error):
            _ = error  // failing without a file keeps rule 1
        }
    }
}
