import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Commit 477da02: failures need ``AttemptLimits/progressFloor(missing:)`` (64 KiB, or a sixteenth of what is missing
/// when less) to start their count again, short bodies need to average `min(4 KiB, that floor)`. Below 1 MiB missing
/// the failures' floor shrinks with what is missing, and below 64 KiB the bodies' does too: each sixteenth of the rest
/// buys the server five answers more. A server that cuts four (or five) range requests in a row before their first body
/// byte and then answers one capped `206` of exactly the bodies' floor, over and over, gets 1,353 requests for a 1 MiB
/// file, 959 of them bringing nothing, and 919 of them for the last 64 KiB alone (one per 71 bytes). A server capping
/// every `206` at 4 KiB (accepted by design) needs 256 requests for 1 MiB.
/// Fixed by making the floor 64 KiB or all that is missing, never a fraction: the plan below (which follows the old
/// rule) now ends the download after a handful of requests.
@Suite("Attack (5th round): zero-byte cuts between capped answers as the floor shrinks")
struct FileTailCutsAttackTests {
    /// The answers the attack sends, found by following ``AttemptLimits`` as the engine does: `nil` is a cut before the
    /// first body byte, a length a `206` capped at it.
    static func plan(total: Int64, firstCut: Int64) -> [Int64?] {
        func floor(_ missing: Int64) -> Int64 { max(1, min(64 << 10, missing / 16)) }
        var offset = firstCut
        var failures = 1
        var gained = firstCut
        if gained >= floor(total) { gained = 0 }
        var plan: [Int64?] = []
        while offset < total {
            let missing = total - offset
            if failures + 1 <= 5 {
                failures += 1
                plan.append(nil)
                continue
            }
            let length = min(4096, floor(missing), missing)
            plan.append(length)
            offset += length
            gained += length
            if length >= missing || gained >= floor(missing) {
                failures = 0
                gained = 0
            }
        }
        return plan
    }

    @Test("Zero-byte cuts between capped 206s of the shrinking floor: no more than 512 requests for 1 MiB")
    func zeroByteCutsBetweenCappedAnswers() async throws {
        let fixture = try DownloadFixture()
        let seed: UInt64 = 6901
        let total: Int64 = 1 << 20
        fixture.serve(.generated(length: total, seed: seed))
        // The first answer (a 200: no range asked yet) is cut after 4 KiB; every later request asks for a range.
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 4096), for: "/file.bin")
        let plan = Self.plan(total: total, firstCut: 4096)
        for answer in plan {
            if let length = answer {
                fixture.server.enqueue(behavior: Behavior(maxPartialLength: length), for: "/file.bin")
            } else {
                fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 0), for: "/file.bin")
            }
        }
        try await fixture.expectBoundedCrawl(
            total: total, seed: seed,
            attack: "\(plan.count { $0 == nil }) of the \(plan.count + 1) planned answers brought nothing")
    }
}
