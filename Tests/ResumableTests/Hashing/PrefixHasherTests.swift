import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Resumable

/// The hasher that follows a temporary file's trusted prefix on a thread of its own.
@Suite("Prefix hasher", .timeLimit(.minutes(2)))
struct PrefixHasherTests {
    /// A temporary file in a directory of its own, removed with the directory.
    final class Scratch: Sendable {
        let directory: TemporaryDirectory
        let file: PartialFile

        init() throws {
            directory = try TemporaryDirectory()
            file = try PartialFile.create(in: directory.path)
        }

        deinit {
            file.release()
        }

        func write(_ bytes: ArraySlice<UInt8>, at offset: Int) throws {
            try bytes.withUnsafeBytes { try file.write($0, at: Int64(offset)) }
        }
    }

    /// Waits on `semaphore` without blocking the cooperative pool; `false` after the tests' deadline.
    static func wait(for semaphore: DispatchSemaphore) async throws -> Bool {
        try await onOwnThread { semaphore.wait(timeout: .now() + .seconds(120)) == .success }
    }

    /// The code of the error `hasher.digest(length:)` throws, called on a thread of its own (it blocks); `nil` when
    /// it returns a digest.
    static func failure(of hasher: PrefixHasher, length: Int64) async throws -> ResumableError.Code? {
        try await onOwnThread { () -> ResumableError.Code? in
            do throws(ResumableError) {
                _ = try hasher.digest(length: length)
                return nil
            } catch {
                return error.code
            }
        }
    }

    @Test(
        "Fed in odd increments while another thread writes, it equals the one-shot digest and never reads ahead",
        arguments: [false, true])
    func followsAWriter(portableOnly: Bool) async throws {
        let scratch = try Scratch()
        let content = testBytes(count: 5 * (1 << 20) + 4_321, seed: 7)
        let expected = try SHA256Hasher.hex(of: content)
        let declared = Atomic<Int64>(0)
        let overreads = Mutex<[String]>([])
        let reads = Mutex<[Int]>([])
        var hooks = PrefixHasher.Hooks()
        hooks.beforeRead = { offset, count in
            let limit = declared.load(ordering: .sequentiallyConsistent)
            if offset + Int64(count) > limit {
                overreads.withLock { $0.append("read \(count) at \(offset) with \(limit) declared") }
            }
            reads.withLock { $0.append(count) }
        }
        // A small odd chunk, so that the thread takes many turns between the writes.
        let chunk = 65_536 + 13
        let hasher = PrefixHasher(file: scratch.file, portableOnly: portableOnly, chunkSize: chunk, hooks: hooks)
        #expect(hasher.backend == (portableOnly ? .portable : SHA256Backend.fastest))
        let digest = try await onOwnThread { () throws -> String in
            var random = SplitMix64(seed: portableOnly ? 11 : 12)
            var written = 0
            while written < content.count {
                let piece = Int(random.next() % (random.next() % 3 == 0 ? 17 : 40_000)) + 1
                let end = min(written + piece, content.count)
                try scratch.write(content[written..<end], at: written)
                written = end
                // The prefix is declared after the write, sometimes lagging behind it, sometimes twice.
                let prefix = random.next() % 4 == 0 ? written - Int(random.next() % UInt64(piece)) : written
                declared.store(Int64(prefix), ordering: .sequentiallyConsistent)
                hasher.advance(to: Int64(prefix))
                if random.next() % 5 == 0 { hasher.advance(to: Int64(prefix / 2)) }
            }
            declared.store(Int64(content.count), ordering: .sequentiallyConsistent)
            return try hasher.digest(length: Int64(content.count))
        }
        #expect(digest == expected)
        #expect(hasher.bytesHashed == Int64(content.count))
        #expect(overreads.withLock { $0 }.isEmpty)
        // Woken only for whole chunks, however small the writes: every read but the tail is a whole chunk.
        let sizes = reads.withLock { $0 }
        #expect(sizes.count == (content.count + chunk - 1) / chunk)
        #expect(sizes.dropLast().allSatisfy { $0 == chunk })
        // Asked again for the same length: the same digest; for another length: refused.
        #expect(try await onOwnThread { try hasher.digest(length: Int64(content.count)) } == expected)
        #expect(try await Self.failure(of: hasher, length: 5) == .fileSystem)
    }

    /// Where the hashing thread took each piece it hashed: from a slot the writer filled, or from the file.
    final class Sources: Sendable {
        let kept = Mutex<[Range<Int64>]>([])
        let read = Mutex<[Range<Int64>]>([])
        let declared = Atomic<Int64>(0)
        let overreads = Mutex<[String]>([])

        /// Hooks that record each piece; the first kept one waits for `release`, and `afterEach` runs after every one.
        func hooks(
            holdingFirstKeptUntil release: DispatchSemaphore? = nil, afterEach: (@Sendable () -> Void)? = nil
        ) -> PrefixHasher.Hooks {
            var hooks = PrefixHasher.Hooks()
            hooks.beforeRead = { [self] offset, count in
                check(offset, count)
                read.withLock { $0.append(offset..<(offset + Int64(count))) }
                afterEach?()
            }
            hooks.beforeHashingKept = { [self] offset, count in
                check(offset, count)
                let first = kept.withLock { kept in
                    kept.append(offset..<(offset + Int64(count)))
                    return kept.count == 1
                }
                if first { release?.wait() }
                afterEach?()
            }
            return hooks
        }

        private func check(_ offset: Int64, _ count: Int) {
            let limit = declared.load(ordering: .sequentiallyConsistent)
            if offset + Int64(count) > limit {
                overreads.withLock { $0.append("\(count) at \(offset) with \(limit) declared") }
            }
        }

        /// Whether the pieces, kept and read, tile `0..<length` exactly: each byte hashed once, in order.
        func tile(_ length: Int64) -> Bool {
            let pieces = (kept.withLock { $0 } + read.withLock { $0 }).sorted { $0.lowerBound < $1.lowerBound }
            var end: Int64 = 0
            for piece in pieces {
                guard piece.lowerBound == end, !piece.isEmpty else { return false }
                end = piece.upperBound
            }
            return end == length
        }

        var keptCount: Int64 { kept.withLock { $0 }.reduce(0) { $0 + Int64($1.count) } }
        var readCount: Int64 { read.withLock { $0 }.reduce(0) { $0 + Int64($1.count) } }
    }

    /// Writes `content[from...]` in pieces of random sizes, keeping each (unless `keeps` says no) and declaring it.
    static func write(
        _ content: [UInt8], from start: Int = 0, to scratch: Scratch, hasher: PrefixHasher, sources: Sources,
        seed: UInt64, keeps: (inout SplitMix64) -> Bool = { _ in true }
    ) throws {
        var random = SplitMix64(seed: seed)
        var written = start
        while written < content.count {
            let piece = Int(random.next() % (random.next() % 3 == 0 ? 17 : 40_000)) + 1
            let end = min(written + piece, content.count)
            try scratch.write(content[written..<end], at: written)
            if keeps(&random) {
                content[written..<end].withUnsafeBytes { hasher.keep($0, at: Int64(written)) }
            }
            written = end
            sources.declared.store(Int64(written), ordering: .sequentiallyConsistent)
            hasher.advance(to: Int64(written))
        }
    }

    @Test("Pieces the writer keeps are hashed from memory, none read back, never beyond the declared prefix")
    func hashesKeptPiecesFromMemory() async throws {
        let scratch = try Scratch()
        let content = testBytes(count: 5 * (1 << 20) + 4_321, seed: 14)
        let sources = Sources()
        // Six slots' worth in all and eight slots: the writer always finds one free, whatever the thread's pace.
        let hasher = PrefixHasher(file: scratch.file, slotCount: 8, hooks: sources.hooks())
        let digest = try await onOwnThread { () throws -> String in
            try Self.write(content, to: scratch, hasher: hasher, sources: sources, seed: 15)
            return try hasher.digest(length: Int64(content.count))
        }
        #expect(digest == (try SHA256Hasher.hex(of: content)))
        #expect(sources.readCount == 0, "read back: \(sources.read.withLock { $0 })")
        #expect(sources.keptCount == Int64(content.count))
        #expect(sources.tile(Int64(content.count)))
        #expect(sources.overreads.withLock { $0 }.isEmpty)
    }

    @Test("With every slot waiting for the thread, the writer keeps nothing more and those bytes are read back")
    func slotsRunOut() async throws {
        let scratch = try Scratch()
        let chunk = 65_536
        let content = testBytes(count: 12 * chunk + 99, seed: 16)
        let sources = Sources()
        let release = DispatchSemaphore(value: 0)
        let hasher = PrefixHasher(
            file: scratch.file, chunkSize: chunk, slotCount: 2, hooks: sources.hooks(holdingFirstKeptUntil: release))
        defer {
            hasher.cancel()
            release.signal()
        }
        // The thread holds its first slot until the whole file is written: the writer can fill one more, no third.
        try await onOwnThread { try Self.write(content, to: scratch, hasher: hasher, sources: sources, seed: 17) }
        release.signal()
        let digest = try await onOwnThread { try hasher.digest(length: Int64(content.count)) }
        #expect(digest == (try SHA256Hasher.hex(of: content)))
        #expect(sources.keptCount >= Int64(chunk) && sources.keptCount <= Int64(2 * chunk), "\(sources.keptCount)")
        #expect(sources.readCount == Int64(content.count) - sources.keptCount)
        #expect(sources.tile(Int64(content.count)))
    }

    @Test(
        "Bytes on disk before, pieces not kept, and kept ones after a gap: each byte hashed once, from wherever it is",
        arguments: [1, 2, 3])
    func mixesKeptAndRead(slotCount: Int) async throws {
        let scratch = try Scratch()
        let chunk = 50_000 + 7
        let content = testBytes(count: 40 * chunk + 123, seed: UInt64(18 + slotCount))
        let sources = Sources()
        let hasher = PrefixHasher(file: scratch.file, chunkSize: chunk, slotCount: slotCount, hooks: sources.hooks())
        // A resume: the first 300,001 bytes were on disk before the hasher, then the rest arrives, one piece in seven
        // not kept (as when the writer found no slot, or a multi-connection phase wrote it).
        let before = 300_001
        try scratch.write(content[0..<before], at: 0)
        sources.declared.store(Int64(before), ordering: .sequentiallyConsistent)
        hasher.advance(to: Int64(before))
        let digest = try await onOwnThread { () throws -> String in
            try Self.write(
                content, from: before, to: scratch, hasher: hasher, sources: sources, seed: UInt64(slotCount),
                keeps: { $0.next() % 7 != 0 })
            return try hasher.digest(length: Int64(content.count))
        }
        #expect(digest == (try SHA256Hasher.hex(of: content)))
        #expect(sources.tile(Int64(content.count)))
        #expect(sources.keptCount > 0 && sources.readCount >= Int64(before))
        #expect(sources.overreads.withLock { $0 }.isEmpty)
    }

    @Test("A slot published after a read passed its start, dropped partial slots, the last one: exactly these sources")
    func slotBoundaries() async throws {
        let scratch = try Scratch()
        let content = testBytes(count: 10_500, seed: 21)
        try scratch.write(content[...], at: 0)
        let sources = Sources()
        let hasher = PrefixHasher(file: scratch.file, chunkSize: 1000, slotCount: 16, hooks: sources.hooks())
        func keep(_ range: Range<Int>) {
            for start in stride(from: range.lowerBound, to: range.upperBound, by: 333) {
                let end = min(start + 333, range.upperBound)
                content[start..<end].withUnsafeBytes { hasher.keep($0, at: Int64(start)) }
            }
        }
        func declare(_ prefix: Int64) {
            sources.declared.store(prefix, ordering: .sequentiallyConsistent)
            hasher.advance(to: prefix)
        }
        // Nothing kept yet: the thread reads the first chunk from the file.
        declare(1000)
        #expect(try await waitUntil { hasher.bytesHashed == 1000 })
        // Slots from 500 (half of it read already) and 1500; the one from 2500 is dropped when the next piece jumps to
        // 3013; slots from 3013 and 4013, and one from 5013 dropped by the jump to 6000; slots from 6000 to 10,000,
        // and a last partial one that the digest hands over.
        keep(500..<3010)
        keep(3013..<5500)
        keep(6000..<10_500)
        // Less than a chunk past 2500 is declared: the thread waits there.
        declare(3012)
        #expect(try await waitUntil { hasher.bytesHashed == 2500 })
        sources.declared.store(10_500, ordering: .sequentiallyConsistent)
        let digest = try await onOwnThread { try hasher.digest(length: 10_500) }
        #expect(digest == (try SHA256Hasher.hex(of: content)))
        #expect(
            sources.kept.withLock { $0 } == [
                1000..<1500, 1500..<2500, 3013..<4013, 4013..<5013, 6000..<7000, 7000..<8000, 8000..<9000,
                9000..<10_000, 10_000..<10_500,
            ])
        #expect(sources.read.withLock { $0 } == [0..<1000, 2500..<3013, 5013..<6000])
        #expect(sources.overreads.withLock { $0 }.isEmpty)
    }

    @Test("The prefix is hashed before the digest is asked for: only the rest is left at the end")
    func hashesAhead() async throws {
        let scratch = try Scratch()
        let content = testBytes(count: 3 << 20, seed: 8)
        let half = content.count / 2
        let hasher = PrefixHasher(file: scratch.file, chunkSize: 256 << 10)
        try scratch.write(content[0..<half], at: 0)
        hasher.advance(to: Int64(half))
        let caughtUp = try await waitUntil { hasher.bytesHashed == Int64(half) }
        #expect(caughtUp, "hashed \(hasher.bytesHashed) of \(half)")
        try scratch.write(content[half...], at: half)
        hasher.advance(to: Int64(content.count))
        let digest = try await onOwnThread { try hasher.digest(length: Int64(content.count)) }
        #expect(digest == (try SHA256Hasher.hex(of: content)))
    }

    @Test("An empty prefix gives the empty digest, without any advance")
    func emptyFile() async throws {
        let scratch = try Scratch()
        let hasher = PrefixHasher(file: scratch.file)
        let digest = try await onOwnThread { try hasher.digest(length: 0) }
        #expect(digest == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    @Test("cancel() unblocks a waiting digest at once, even while the thread is stuck in a read")
    func cancelUnblocksDigest() async throws {
        let scratch = try Scratch()
        try scratch.write(testBytes(count: 1 << 20, seed: 9)[...], at: 0)
        let reading = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let waiting = DispatchSemaphore(value: 0)
        let ended = DispatchSemaphore(value: 0)
        var hooks = PrefixHasher.Hooks()
        hooks.beforeRead = { offset, _ in
            guard offset == 0 else { return }
            reading.signal()
            release.wait()
        }
        hooks.digestWillWait = { waiting.signal() }
        hooks.threadDidEnd = { ended.signal() }
        let hasher = PrefixHasher(file: scratch.file, hooks: hooks)
        // Whatever fails below, the hashing thread is let go: a thread left blocked keeps the test process alive.
        defer {
            hasher.cancel()
            release.signal()
        }
        hasher.advance(to: 1 << 20)
        try #require(try await Self.wait(for: reading), "the thread never read")
        // A task, not `async let`: an `async let` is awaited when the scope ends, before the `defer` above cancels,
        // so a failed `#require` below would wait for a digest only the cancel ends (and leave its thread blocked).
        let outcome = Task { try await Self.failure(of: hasher, length: 1 << 20) }
        try #require(try await Self.wait(for: waiting), "digest never started waiting")
        hasher.cancel()
        // The thread is still held in its read: the digest returned on its own.
        #expect(try await outcome.value == .cancelled)
        #expect(try await Self.failure(of: hasher, length: 1 << 20) == .cancelled)
        hasher.cancel()
        release.signal()
        #expect(try await Self.wait(for: ended), "the thread did not end after cancel")
        #expect(hasher.bytesHashed == 0)
    }

    @Test("cancel() ends a sleeping thread, and so does dropping the hasher")
    func cancelEndsTheThread() async throws {
        let scratch = try Scratch()
        try scratch.write(testBytes(count: 1000, seed: 10)[...], at: 0)
        for cancels in [true, false] {
            let ended = DispatchSemaphore(value: 0)
            var hooks = PrefixHasher.Hooks()
            hooks.threadDidEnd = { ended.signal() }
            var hasher: PrefixHasher? = PrefixHasher(file: scratch.file, chunkSize: 100, hooks: hooks)
            hasher?.advance(to: 1000)
            let caughtUp = try await waitUntil { hasher?.bytesHashed == 1000 }
            #expect(caughtUp)
            if cancels {
                hasher?.cancel()
                #expect(try await Self.wait(for: ended), "cancel did not end the thread")
                if let hasher { #expect(try await Self.failure(of: hasher, length: 1000) == .cancelled) }
            } else {
                hasher = nil
                #expect(try await Self.wait(for: ended), "dropping the hasher did not end the thread")
            }
        }
    }

    @Test("A file shorter than the digest asked for is a file-system error, not a hang")
    func shortFile() async throws {
        let scratch = try Scratch()
        try scratch.write(testBytes(count: 1000, seed: 11)[...], at: 0)
        let hasher = PrefixHasher(file: scratch.file)
        hasher.advance(to: 1000)
        #expect(try await Self.failure(of: hasher, length: 5000) == .fileSystem)
    }

    @Test("A file released under the hasher, or a digest shorter than the declared prefix, throws")
    func misuseThrows() async throws {
        let released = try Scratch()
        try released.write(testBytes(count: 1000, seed: 12)[...], at: 0)
        released.file.release()
        let first = PrefixHasher(file: released.file)
        first.advance(to: 1000)
        #expect(try await Self.failure(of: first, length: 1000) == .fileSystem)

        let scratch = try Scratch()
        try scratch.write(testBytes(count: 1000, seed: 13)[...], at: 0)
        let second = PrefixHasher(file: scratch.file)
        second.advance(to: 1000)
        #expect(try await Self.failure(of: second, length: 999) == .fileSystem)
        let third = PrefixHasher(file: scratch.file)
        #expect(try await Self.failure(of: third, length: -1) == .fileSystem)
    }
}
