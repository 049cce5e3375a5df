import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Adversarial review of c15a57a (end-game work stealing), 6b71c21 (a phase ended by failures in a row halves the
/// task's connection ceiling), 9b83aa2 (answers dropped at their head counted) and 27e1a3e (preallocation when a
/// second connection opens).
@Suite("Attack (8th round): end game, halved phases, dropped answers, preallocation")
struct EndgameAndPhaseLimitAttackTests {
    static let mebibyte: Int64 = 1 << 20

    /// 6b71c21 halves ``SegmentSchedule/loweredTo`` whenever `maximumFailuresInARow` failures end a phase, and the
    /// engine keeps it as the task's connection ceiling for good. The phase that 6b71c21 aims at never brought the
    /// floor (`madeProgress` false: segments cut after a byte). This one is a working link with one bad moment: 16
    /// connections that each brought 32 KiB (512 KiB: the phase made progress) are reset at the same instant (a NAT
    /// or proxy dropping its table, a backend restarting behind a proxy), and the replacements opened meanwhile have
    /// not brought a byte yet. The server is healthy from then on, yet every later phase of the task opens 8.
    /// Before 6b71c21 the next phase opened 16 again. Each such moment halves again (16, 8 after nine cuts of 8
    /// replacements, ...), and `.automatic` never ramps again once a ceiling is set.
    @Test("One moment that resets 16 working connections at once halves the connections for the rest of the task")
    func oneBadMomentHalvesForGood() async throws {
        let fixture = try DownloadFixture()
        let seed: UInt64 = 7201
        let total: Int64 = 16 * Self.mebibyte
        let path = "/file.bin"
        let sent: Int64 = 32 << 10
        // Any request not scripted below (the replacements of the cut segments) is held right after its head.
        let replacements = BodyGate(holdingAfter: 0)
        fixture.serve(.generated(length: total, seed: seed, behavior: Behavior(gate: replacements)), at: path)
        // The first answer (the phase's probe, a 200) is held after 32 KiB and is not cut.
        let probe = BodyGate(holdingAfter: sent)
        fixture.server.enqueue(behavior: Behavior(gate: probe), for: path)
        // The 15 segments of .fixed(16) start at k MiB: each is held after 32 KiB, then sends one byte and is reset.
        let moment = BodyGate(holdingAfter: sent)
        for k in 1..<16 {
            fixture.server.enqueue(
                behavior: Behavior(dropAfterBytes: sent + 1, resetOnDrop: true, gate: moment), for: path,
                whenRangeStartsAt: Int64(k) * Self.mebibyte)
        }
        // From the first retry on, the server is healthy; its answers are held after 64 KiB so that the next phase's
        // connections can be counted.
        let later = BodyGate(holdingAfter: 64 << 10)
        let retried = Mutex(false)
        var configuration = Segmented.configuration(.fixed(16), retries: 5)
        let server = fixture.server
        configuration.eventHandler = { event in
            guard case .retrying = event else { return }
            let first = retried.withLock { done in
                defer { done = true }
                return !done
            }
            guard first else { return }
            // Synchronously, before the engine's back-off: the next phase's requests see this resource.
            server.register(
                .generated(length: total, seed: seed, behavior: Behavior(gate: later)), at: path)
            probe.open()
            replacements.open()
        }
        let task = try fixture.download(path, configuration: configuration)
        defer {
            probe.open()
            moment.open()
            replacements.open()
            later.open()
        }
        #expect(await moment.waitUntilHeld(count: 15, timeout: Waiting.deadline), "\(moment)")
        #expect(await probe.waitUntilHeld(count: 1, timeout: Waiting.deadline), "\(probe)")
        // The bad moment: all 15 segments reset at once.
        moment.open()
        #expect(try await waitUntil { retried.withLock { $0 } }, "the phase ended by failures in a row")
        // The link is fine again: the next phase should open as many connections as the first one did.
        let (sixteen, held) = try await fixture.nextPhaseHolds(16, at: later, task: task, total: total, seed: seed)
        #expect(
            sixteen,
            "after one moment that reset the connections of a phase that had brought 512 KiB, the next phase opened \(held) connections, not 16"
        )
    }

    /// 27e1a3e makes `cresumable_preallocate` call `fallocate` 8 MiB at a time. One call for the whole length failed at
    /// once on a disk too small for the file (ext4 and tmpfs check the free space first) and allocated nothing: the
    /// doc of ``DownloadEngine/transfer(_:session:)`` still says "It fails early on a full disk". Piece by piece, every
    /// piece that fits succeeds and extends the file, so the disk is filled to its last block before `ENOSPC` comes;
    /// the download then fails and keeps its temporary file (for a resume) with all those blocks. A file larger than
    /// the free space (or a server claiming a Content-Length of a terabyte) now leaves the user's disk full (all but
    /// the last piece that did not fit) instead of failing with the disk untouched. Measured: a 64 MiB tmpfs, a 1 GiB
    /// file, `.fixed(2)`: 8 MiB free after the failure, 56 MiB allocated to the temporary file that stays; with the
    /// single call of 496902f, 64 MiB free.
    @Test("A file larger than the free space: preallocation fails without filling the disk")
    func preallocationDoesNotFillTheDisk() async throws {
        guard let disk = try await SmallFileSystem.mount(kilobytes: 64 << 10) else {
            print("⚠️ cannot mount a small tmpfs (needs root): preallocationDoesNotFillTheDisk did not run")
            return
        }
        let fixture = try DownloadFixture()
        let seed: UInt64 = 7202
        let total: Int64 = 1 << 30
        // Every answer is held after 64 KiB: the download writes next to nothing, only preallocation takes space.
        let gate = BodyGate(holdingAfter: 64 << 10)
        defer { gate.open() }
        fixture.serve(.generated(length: total, seed: seed, behavior: Behavior(gate: gate)))
        let task = try DownloadTask(
            url: fixture.server.url(for: "/file.bin"), destination: .directory(disk.directory.url),
            configuration: Segmented.configuration(.fixed(2), retries: 0))
        let error = try #require(await failure(of: task))
        gate.open()
        #expect(error.code == .diskFull, "\(error)")
        let attributes = try FileManager.default.attributesOfFileSystem(forPath: disk.directory.path)
        let free = (attributes[.systemFreeSize] as? NSNumber)?.int64Value ?? -1
        let size = (attributes[.systemSize] as? NSNumber)?.int64Value ?? -1
        let files = (try? FileManager.default.contentsOfDirectory(atPath: disk.directory.path)) ?? []
        let lengths = files.map { name in
            ((try? FileManager.default.attributesOfItem(atPath: disk.directory.path + "/" + name))?[.size] as? NSNumber)?
                .int64Value ?? -1
        }
        #expect(
            free >= size / 2,
            "after the failed preallocation \(free) of \(size) bytes are free; files left: \(zip(files, lengths).map { "\($0) (\($1) bytes)" })"
        )
    }
}
