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
