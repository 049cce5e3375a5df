import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Checkpoints of a multi-connection download: whenever the handler runs, the token on disk lists only bytes that
/// are in the file (flushed) and are the server's.
@Suite("Checkpoints of a multi-connection download")
struct SegmentedCheckpointTests {
    static let path = Segmented.path
    static let total = Segmented.total

    /// What the checkpoint handler saw.
    final class Seen: Sendable {
        private let state = Mutex<(tokens: [ResumeToken], problems: [String])>(([], []))

        func record(_ token: ResumeToken, problems: [String]) {
            state.withLock { state in
                state.tokens.append(token)
                state.problems += problems
            }
        }

        var tokens: [ResumeToken] { state.withLock { $0.tokens } }
        var problems: [String] { state.withLock { $0.problems } }
    }

    @Test(
        "At every checkpoint the token file lists only flushed bytes equal to the server's, and only ever grows",
        arguments: TransportKind.all)
    func checkpointsAreConsistent(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let seed: UInt64 = 51
        fixture.serve(.generated(length: Self.total, seed: seed))
        // All four responses wait at one gate, which the test moves on in small steps: bytes keep arriving on four
        // connections at once, and periodic checkpoints come meanwhile.
        let gate = BodyGate(holdingAfter: 16 << 10)
        fixture.server.enqueue(behavior: Behavior(gate: gate), for: Self.path)
        for index in 1..<4 {
            fixture.server.enqueue(
                behavior: Behavior(gate: gate), for: Self.path, whenRangeStartsAt: Segmented.start(index, of: 4))
        }
        let tokenFile = fixture.directory.url.appendingPathComponent("checkpoint.json")
        var checkpointing = DownloadTask.Checkpointing.file(tokenFile, interval: .milliseconds(50))
        let write = checkpointing.handler
        let seen = Seen()
        checkpointing.handler = { token in
            try write(token)
            // What a crash right now would leave: the token on disk, and the file it names.
            var problems: [String] = []
            do {
                let onDisk = try ResumeToken(contentsOf: tokenFile)
                if onDisk != token { problems.append("the token file differs from the checkpoint") }
                for range in onDisk.presentRanges {
                    if try readBytes(of: onDisk.tempPath, in: range) != serverBytes(seed: seed, in: range) {
                        problems.append("bytes \(range) of \(onDisk.tempPath) are not the server's")
                    }
                }
            } catch {
                problems.append("\(error)")
            }
            seen.record(token, problems: problems)
        }
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(4), events: events)
        configuration.checkpointing = checkpointing
        let task = try fixture.download(configuration: configuration)
        #expect(await gate.waitUntilHeld(count: 4, timeout: Waiting.deadline), "\(gate)")
        // Segments are 2 MiB; the gate never lets a response send that much, so all four keep going until it opens.
        let enough = try await trickle(gate, bodyLength: Segmented.start(1, of: 4)) {
            seen.tokens.filter { $0.version == 2 }.count >= 4
        }
        #expect(enough, "\(seen.tokens.count) checkpoints, \(gate)")
        gate.open()
        let result = try await task.value

        #expect(try fixture.file(result.fileURL, holds: Self.total, seed: seed))
        #expect(seen.problems.isEmpty, "\(seen.problems)")
        let tokens = seen.tokens
        #expect(tokens.contains { $0.completedRanges.count >= 3 }, "a checkpoint listed the three other segments")
        for (earlier, later) in zip(tokens, tokens.dropFirst()) {
            let kept = ByteRangeSet(later.presentRanges)
            #expect(
                earlier.presentRanges.allSatisfy { kept.contains($0) },
                "a checkpoint dropped bytes an earlier one listed: \(earlier.presentRanges) then \(later.presentRanges)"
            )
        }
        #expect(tokens.last?.offset == Self.total, "the last checkpoint, before the move, covers the whole file")
        #expect(events.progressConnections.contains { $0 > 1 }, "progress counts the connections")
        #expect(!FileManager.default.fileExists(atPath: tokenFile.path), "a finished download leaves no checkpoint")
    }
}
