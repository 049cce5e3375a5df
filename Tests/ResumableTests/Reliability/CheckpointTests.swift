import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

@Suite("Checkpoints")
struct CheckpointTests {
    final class Collected: Sendable {
        let tokens = Mutex<[(token: ResumeToken, bytesOnDisk: Int)]>([])
    }

    @Test("Checkpoints start when the response is accepted, advance in order, and never cover unflushed bytes")
    func checkpointsAdvance() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: 1_500_000)
        let gate = fixture.serveHeld(.bytes(content), after: 100_000)
        let collected = Collected()
        var configuration = DownloadFixture.configuration()
        configuration.checkpointing = DownloadTask.Checkpointing(interval: .milliseconds(100)) { token in
            let size = (try? FileManager.default.attributesOfItem(atPath: token.tempPath)[.size] as? Int) ?? -1
            collected.tokens.withLock { $0.append((token, size)) }
        }
        let task = try fixture.download(configuration: configuration)
        // Periodic checkpoints come while bytes arrive: let the body go on in small steps until three more came.
        for round in 1...3 {
            let before = collected.tokens.withLock { $0.count }
            let advanced = try await trickle(gate, bodyLength: Int64(content.count)) {
                collected.tokens.withLock { $0.count } > before
            }
            #expect(advanced, "checkpoint \(round) after the first never came: \(gate)")
        }
        gate.open()
        let result = try await task.value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        let tokens = collected.tokens.withLock { $0 }
        #expect(tokens.count >= 4, "the first, then one for each round")
        #expect(tokens.first?.token.offset == 0, "the first checkpoint comes as soon as the response is accepted")
        let offsets = tokens.map(\.token.offset)
        #expect(offsets == offsets.sorted())
        for (token, size) in tokens where size >= 0 {
            #expect(Int64(size) >= token.offset, "a checkpoint never claims bytes the file does not hold")
        }
    }

    @Test("A checkpoint file on disk is a valid token that resumes to the right file")
    func checkpointFileResumes() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: 4_000_000)
        let gate = fixture.serveHeld(.bytes(content), after: 200_000)
        let tokenFile = fixture.directory.url.appendingPathComponent("checkpoint.json")
        var configuration = DownloadFixture.configuration()
        configuration.checkpointing = .file(tokenFile, interval: .milliseconds(50))
        let task = try fixture.download(configuration: configuration)
        // Simulate a crash: the task is abandoned without producing resume data; only the checkpoint is left.
        let checkpointed = try await trickle(gate, bodyLength: Int64(content.count)) {
            ((try? ResumeToken(contentsOf: tokenFile))?.offset ?? 0) >= 200_000
        }
        #expect(checkpointed, "\(gate)")
        // Checkpoints only move forward, and the gate keeps the download from finishing: this one is at 200 000 or
        // beyond, and before the end.
        let found = try ResumeToken(contentsOf: tokenFile)
        #expect(found.offset >= 200_000)
        #expect(found.offset < 4_000_000)
        _ = await task.cancelProducingResumeData()
        fixture.serve(.bytes(content))
        let result = try await DownloadTask.resume(from: found, configuration: configuration).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(result.resumedAtOffset == found.offset)
        #expect(!FileManager.default.fileExists(atPath: tokenFile.path), "a finished download leaves no checkpoint")
    }
}
