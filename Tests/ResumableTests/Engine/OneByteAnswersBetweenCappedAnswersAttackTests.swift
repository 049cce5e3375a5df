import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Commit 16552e4: a short body no longer clears the *failures*, but a 4 KiB short `206` (``AttemptLimits/
/// minimumBodyProgress``) still clears the *fruitless bodies* before it. helper-67's attack mixed cuts in; without
/// any cut at all, a server that answers ten range requests with a one-byte `206` (ten fruitless bodies, one below
/// ``AttemptLimits/maximumFruitlessBodies``) and then one with a 4 KiB `206`, over and over, never reaches a limit:
/// eleven requests for each 4 KiB and ten bytes, for as long as the file has bytes (2,816 requests per MiB, 11,000
/// for 4 MiB), without a single failure after the first answer's cut. A server that caps every `206` at 4 KiB
/// (accepted by design) needs 256 requests for 1 MiB.
@Suite("Attack (4th round): ten one-byte 206s between 4 KiB answers")
struct OneByteAnswersBetweenCappedAnswersAttackTests {
    @Test("Ten one-byte 206s, then a 4 KiB one, over and over: the download does not take over 512 requests for 1 MiB")
    func oneByteAnswersBetween4KiBAnswers() async throws {
        let fixture = try DownloadFixture()
        let seed: UInt64 = 6801
        let total: Int64 = 1 << 20
        fixture.serve(.generated(length: total, seed: seed))
        // The first answer (a 200: no range asked yet) is cut after 4 KiB; every later request asks for a range.
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 4096), for: "/file.bin")
        let cycles = Int(total / 4096) + 1
        for _ in 0..<cycles {
            for _ in 0..<10 { fixture.server.enqueue(behavior: Behavior(maxPartialLength: 1), for: "/file.bin") }
            fixture.server.enqueue(behavior: Behavior(maxPartialLength: 4096), for: "/file.bin")
        }
        try await fixture.expectBoundedCrawl(
            total: total, seed: seed, attack: "10 of every 11 answers brought one byte")
    }
}
