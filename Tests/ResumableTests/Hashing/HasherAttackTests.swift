import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Resumable

/// Adversarial review of c312450 (``PrefixHasher`` hashes the pieces the writer kept in slots instead of reading them
/// back): whatever the interleaving of the writer, the hashing thread and the digest, the digest is that of the bytes
/// in the file, each hashed once, and nothing traps or hangs.
@Suite("Prefix hasher under attack", .timeLimit(.minutes(3)))
struct HasherAttackTests {
    typealias Scratch = PrefixHasherTests.Scratch

    /// A handshake between the writer and the hashing thread: the thread, in a hook, waits until the writer has
    /// written a given number of pieces (or is done), so that slots fill up, run out, and are published in every
    /// order the test picks. Condition waits only: nothing depends on timing.
    final class Lockstep: Sendable {
        let pieces = Mutex<Int>(0)
        let writerDone = Atomic<Bool>(false)
        let condition = NSCondition()
        /// Which hook calls hold the thread, and for how many pieces; decided on the hashing thread only.
        let plan: Mutex<SplitMix64>
        /// Where each hashed piece came from, and reads past the declared prefix.
        let sources = PrefixHasherTests.Sources()

        init(seed: UInt64) {
            plan = Mutex(SplitMix64(seed: seed))
        }

        func wrotePiece() {
            condition.lock()
            pieces.withLock { $0 += 1 }
            condition.broadcast()
            condition.unlock()
        }

        func finish() {
            condition.lock()
            writerDone.store(true, ordering: .sequentiallyConsistent)
            condition.broadcast()
            condition.unlock()
        }

        /// On the hashing thread: maybe wait until the writer wrote a few more pieces.
        func maybeHold() {
            let more = plan.withLock { random -> Int in
                random.next() % 3 == 0 ? Int(random.next() % 40) + 1 : 0
            }
            guard more > 0 else { return }
            condition.lock()
            let target = pieces.withLock { $0 } + more
            while pieces.withLock({ $0 }) < target, !writerDone.load(ordering: .sequentiallyConsistent) {
                _ = condition.wait(until: Date().addingTimeInterval(120))
            }
            condition.unlock()
        }

        func hooks() -> PrefixHasher.Hooks {
            sources.hooks(afterEach: { [self] in maybeHold() })
        }
    }

    @Test(
        "Held at random points while the writer fills, drops and runs out of slots, the digest is always the file's",
        arguments: [0, 1, 2, 3, 8], [UInt64(1), 2, 3, 4])
    func lockstepInterleavings(slotCount: Int, seed: UInt64) async throws {
        let scratch = try Scratch()
        // An odd chunk, pieces from 1 byte to several chunks, so that pieces straddle slots in every way.
        let chunk = 4_099
        let content = testBytes(count: 97 * chunk + 1_234, seed: 100 + seed)
        let lockstep = Lockstep(seed: seed &* 31 &+ UInt64(slotCount))
        let hasher = PrefixHasher(
            file: scratch.file, chunkSize: chunk, slotCount: slotCount, hooks: lockstep.hooks())
        defer { hasher.cancel() }
        // Some bytes on disk before the hasher, as after a resume.
        let before = Int(seed % 3) * 7_777
        try scratch.write(content[0..<before], at: 0)
        lockstep.sources.declared.store(Int64(before), ordering: .sequentiallyConsistent)
        hasher.advance(to: Int64(before))
        let digest = try await onOwnThread { () throws -> String in
            var random = SplitMix64(seed: seed)
            var written = before
            while written < content.count {
                let kind = random.next() % 10
                let piece =
                    kind == 0 ? Int(random.next() % UInt64(3 * chunk)) + 1 : Int(random.next() % 700) + 1
                let end = min(written + piece, content.count)
                try scratch.write(content[written..<end], at: written)
                // One piece in eight is not kept (a writer that had no slot, or a multi-connection phase).
                if random.next() % 8 != 0 {
                    content[written..<end].withUnsafeBytes { hasher.keep($0, at: Int64(written)) }
                }
                written = end
                lockstep.sources.declared.store(Int64(written), ordering: .sequentiallyConsistent)
                hasher.advance(to: Int64(written))
                lockstep.wrotePiece()
            }
            lockstep.finish()
            return try hasher.digest(length: Int64(content.count))
        }
        #expect(digest == (try SHA256Hasher.hex(of: content)))
        #expect(lockstep.sources.tile(Int64(content.count)))
        #expect(lockstep.sources.overreads.withLock { $0 }.isEmpty)
        // The slots were used (the point of the test), unless there are none.
        #expect((slotCount == 0) == lockstep.sources.kept.withLock { $0 }.isEmpty)
    }

    @Test("Kept bytes beyond the length asked for are not hashed: the digest is of the first `length` bytes only")
    func digestShorterThanKept() async throws {
        let scratch = try Scratch()
        let chunk = 1_000
        let content = testBytes(count: 2_500, seed: 7)
        try scratch.write(content[...], at: 0)
        let hasher = PrefixHasher(file: scratch.file, chunkSize: chunk, slotCount: 4)
        // Kept (and written) 2,500 bytes, declared only 1,700: a digest of 1,700 bytes.
        content[0..<2_500].withUnsafeBytes { hasher.keep($0, at: 0) }
        hasher.advance(to: 1_700)
        let digest = try await onOwnThread { try hasher.digest(length: 1_700) }
        #expect(digest == (try SHA256Hasher.hex(of: Array(content[0..<1_700]))))
    }

    @Test("Kept, cancelled, kept again, asked for a digest: cancelled, no trap, and the file is read by no one")
    func cancelThenKeep() async throws {
        let scratch = try Scratch()
        let chunk = 512
        let content = testBytes(count: 20 * chunk, seed: 8)
        try scratch.write(content[...], at: 0)
        let hasher = PrefixHasher(file: scratch.file, chunkSize: chunk, slotCount: 2)
        content[0..<3_000].withUnsafeBytes { hasher.keep($0, at: 0) }
        hasher.advance(to: 3_000)
        hasher.cancel()
        content[3_000...].withUnsafeBytes { hasher.keep($0, at: 3_000) }
        hasher.advance(to: Int64(content.count))
        #expect(try await PrefixHasherTests.failure(of: hasher, length: Int64(content.count)) == .cancelled)
        hasher.cancel()
    }

    @Test("Keeps after the digest (a writer that goes on) do not change it, nor trap")
    func keepAfterDigest() async throws {
        let scratch = try Scratch()
        let chunk = 512
        let content = testBytes(count: 10 * chunk + 3, seed: 9)
        try scratch.write(content[...], at: 0)
        let hasher = PrefixHasher(file: scratch.file, chunkSize: chunk, slotCount: 3)
        content[0..<1_500].withUnsafeBytes { hasher.keep($0, at: 0) }
        hasher.advance(to: 1_500)
        let digest = try await onOwnThread { try hasher.digest(length: 1_500) }
        content[1_500...].withUnsafeBytes { hasher.keep($0, at: 1_500) }
        hasher.advance(to: Int64(content.count))
        #expect(digest == (try SHA256Hasher.hex(of: Array(content[0..<1_500]))))
        #expect(try await onOwnThread { try hasher.digest(length: 1_500) } == digest)
    }

    @Test("Pieces kept at offsets past 4 GiB (a sparse file): slots and reads at the right places")
    func highOffsets() async throws {
        let scratch = try Scratch()
        // The hasher hashes from byte 0, so hashing 5 GiB would take too long here: a piece kept at 5 GiB sits in a
        // slot ahead of the prefix, and must neither be taken for prefix bytes nor keep the thread from reading.
        let chunk = 1 << 16
        let length = 3 * chunk + 17
        let content = testBytes(count: length, seed: 11)
        try scratch.write(content[...], at: 0)
        let hasher = PrefixHasher(file: scratch.file, chunkSize: chunk, slotCount: 2)
        content[0..<chunk].withUnsafeBytes { hasher.keep($0, at: 5 << 30) }
        content[chunk..<length].withUnsafeBytes { hasher.keep($0, at: Int64(chunk)) }
        let digest = try await onOwnThread { try hasher.digest(length: Int64(length)) }
        #expect(digest == (try SHA256Hasher.hex(of: content)))
    }
}
