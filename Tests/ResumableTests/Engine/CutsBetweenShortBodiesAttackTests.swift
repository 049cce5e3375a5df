import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Commit 93cecfe: a body that counts as progress (a short `206` bringing 4 KiB, ``AttemptLimits/minimumBodyProgress``)
/// now clears the failures before it, and the fruitless bodies too. A failure, though, is meant to need 64 KiB
/// (``AttemptLimits/minimumProgress``) before the count starts again. A hostile server that, over and over, cuts five
/// connections after one byte each, answers ten range requests with a one-byte `206`, and then one with a 4 KiB `206`,
/// never reaches any limit: sixteen requests for each 4 KiB (plus fifteen bytes), for as long as the file has bytes.
/// A server that caps every `206` at 4 KiB (by design, accepted) needs one request per 4 KiB: this one gets sixteen,
/// and the failure limit, which should end it after 5 cuts per 64 KiB, ends it never.
@Suite("Attack: a 4 KiB body clears every failure before it")
struct CutsBetweenShortBodiesAttackTests {
    @Test("Cuts and one-byte 206s between 4 KiB answers: the download does not take over 512 requests for 1 MiB")
    func cutsBetweenSmallBodies() async throws {
        let fixture = try DownloadFixture()
        let seed: UInt64 = 6701
        let total: Int64 = 1 << 20
        fixture.serve(.generated(length: total, seed: seed))
        // Each cycle: five cuts after one byte (five failures, 5 bytes), ten one-byte 206s (ten fruitless bodies),
        // one 4 KiB 206 (progress: clears both counts).
        let cycles = Int(total / 4096) + 1
        for _ in 0..<cycles {
            for _ in 0..<5 { fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 1), for: "/file.bin") }
            for _ in 0..<10 { fixture.server.enqueue(behavior: Behavior(maxPartialLength: 1), for: "/file.bin") }
            fixture.server.enqueue(behavior: Behavior(maxPartialLength: 4096), for: "/file.bin")
        }
        try await fixture.expectBoundedCrawl(
            total: total, seed: seed,
            attack: "15 of every 16 answers brought nothing (a cut after a byte, a one-byte 206)")
    }
}
