import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review of d7efdc2 (halving only after a phase without progress) and c7e1922 (preallocation checks the
/// free space first).
@Suite("Attack (9th round): refusals after a bad moment, the free-space check")
struct PhaseProgressAndFreeSpaceAttackTests {
    static let mebibyte: Int64 = 1 << 20

    /// d7efdc2 keeps the count of a phase that made progress when failures in a row end it ("a working link, then one
    /// bad moment that cut every connection keeps the count"). The same moment, as a restarting backend makes it,
    /// also turns away the replacements opened meanwhile (head sent, connection reset before a body byte: how the
    /// schedule recognizes a per-client connection limit). Each such refusal lowers the phase's target to the
    /// connections still working and sets ``SegmentSchedule/loweredTo`` whatever ``SegmentSchedule/madeProgress``
    /// says, and the engine keeps it as the task's ceiling for good; `.automatic` then never ramps again. Yet sixteen
    /// connections had just worked at the same time: no limit below sixteen can be what turned them away. Here eight
    /// of sixteen working connections are reset, their eight replacements turned away, then the other seven reset
    /// (the ninth failure ends the phase, which had brought 512 KiB); the server is healthy from then on, and the next
    /// phase opens 8 connections, not 16.
    @Test("Replacements turned away during one bad moment lower the connections for the rest of the task")
    func refusedReplacementsDuringOneBadMomentLowerForGood() async throws {
        let fixture = try DownloadFixture()
        let seed: UInt64 = 7302
        let total: Int64 = 16 * Self.mebibyte
        let path = "/file.bin"
        let sent: Int64 = 32 << 10
        // Any request not scripted below is held right after its head (none is expected before the retry).
        let unscripted = BodyGate(holdingAfter: 0)
        fixture.serve(.generated(length: total, seed: seed, behavior: Behavior(gate: unscripted)), at: path)
        // The first answer (the phase's probe, a 200) is held after 32 KiB.
        let probe = BodyGate(holdingAfter: sent)
        fixture.server.enqueue(behavior: Behavior(gate: probe), for: path)
        // The replacements of the first eight cut segments (unknown starts: the FIFO queue): the head, then a reset.
        for _ in 0..<8 {
            fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 0, resetOnDrop: true), for: path)
        }
        // Segments 1...8 are reset first, 9...15 later; each after 32 KiB and one more byte.
        let first = BodyGate(holdingAfter: sent)
        let second = BodyGate(holdingAfter: sent)
        for k in 1..<16 {
            fixture.server.enqueue(
                behavior: Behavior(dropAfterBytes: sent + 1, resetOnDrop: true, gate: k <= 8 ? first : second),
                for: path, whenRangeStartsAt: Int64(k) * Self.mebibyte)
        }
        let later = BodyGate(holdingAfter: 64 << 10)
        let retried = Mutex(false)
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(16), retries: 5)
        let server = fixture.server
        configuration.eventHandler = { event in
            events.append(event)
            guard case .retrying = event else { return }
            let isFirst = retried.withLock { done in
                defer { done = true }
                return !done
            }
            guard isFirst else { return }
            // Synchronously, before the engine's back-off: the server is healthy again.
            server.clearQueue(for: path)
            server.register(.generated(length: total, seed: seed, behavior: Behavior(gate: later)), at: path)
            probe.open()
            unscripted.open()
        }
        let task = try fixture.download(path, configuration: configuration)
        defer {
            probe.open()
            first.open()
            second.open()
            unscripted.open()
            later.open()
        }
        #expect(await first.waitUntilHeld(count: 8, timeout: Waiting.deadline), "\(first)")
        #expect(await second.waitUntilHeld(count: 7, timeout: Waiting.deadline), "\(second)")
        #expect(await probe.waitUntilHeld(count: 1, timeout: Waiting.deadline), "\(probe)")
        // The bad moment: eight segments reset, and their replacements turned away.
        first.open()
        // Eight resets (eight failures in a row: not more than the limit) and eight refusals (no failures).
        #expect(
            try await waitUntil { fixture.server.queuedCount(for: path) == 0 && events.segmentsFailed.count >= 16 },
            "\(events.segmentsFailed.count) segments failed, \(fixture.server.queuedCount(for: path)) refusals left")
        // The rest of the moment: the other seven reset (the ninth failure in a row ends the phase).
        second.open()
        #expect(try await waitUntil { retried.withLock { $0 } }, "the phase ended by failures in a row")
        let (sixteen, held) = try await fixture.nextPhaseHolds(16, at: later, task: task, total: total, seed: seed)
        #expect(
            sixteen,
            "after one moment that reset 8 of 16 working connections and turned away their replacements, the next phase opened \(held) connections, not 16"
        )
    }

    /// c7e1922 checks `needed / f_frsize > available`: the division rounds down, so a file that needs one block more
    /// than the disk has (a length that is not a multiple of the block) passes the check, and `fallocate`, 8 MiB at a
    /// time, fills the disk to its last block before the last piece fails with `ENOSPC`: exactly what the check was
    /// meant to prevent. A 64 MiB tmpfs, a file of its free space plus one byte: the disk is left full.
    @Test("A file one byte larger than the free space: preallocation fails without filling the disk")
    func preallocationOneByteTooLarge() async throws {
        guard let disk = try await SmallFileSystem.mount(kilobytes: 64 << 10) else {
            print("⚠️ cannot mount a small tmpfs (needs root): preallocationOneByteTooLarge did not run")
            return
        }
        var space = statvfs()
        #expect(statvfs(disk.directory.path, &space) == 0)
        let free = Int64(space.f_bfree) * Int64(space.f_frsize)
        let fixture = try DownloadFixture()
        let seed: UInt64 = 7303
        let total = free + 1
        let gate = BodyGate(holdingAfter: 64 << 10)
        defer { gate.open() }
        fixture.serve(.generated(length: total, seed: seed, behavior: Behavior(gate: gate)))
        let task = try DownloadTask(
            url: fixture.server.url(for: "/file.bin"), destination: .directory(disk.directory.url),
            configuration: Segmented.configuration(.fixed(2), retries: 0))
        let error = try #require(await failure(of: task))
        gate.open()
        #expect(error.code == .diskFull, "\(error)")
        var after = statvfs()
        #expect(statvfs(disk.directory.path, &after) == 0)
        let freeAfter = Int64(after.f_bfree) * Int64(after.f_frsize)
        #expect(
            freeAfter >= free / 2,
            "a file of \(total) bytes on a disk with \(free) free: after the failed preallocation \(freeAfter) bytes are free"
        )
    }
}
