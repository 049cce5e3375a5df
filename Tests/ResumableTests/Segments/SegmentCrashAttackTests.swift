import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Adversarial review of issue 10 (several connections): the tokens a multi-connection phase hands out must stay
/// tokens the library itself can read back, or a crash (or a pause whose token goes through a file) loses every
/// byte downloaded.
@Suite("Segments under attack: crash-durable tokens")
struct SegmentCrashAttackTests {
    static let path = Segmented.path
    static let total = Segmented.total
    /// The most ranges a version 2 token may list (``ResumeToken/maximumRangeCount``): the reader refuses more.
    static let rangeLimit = ResumeToken.maximumRangeCount

    /// A version 2 token that the reader accepts (exactly ``rangeLimit`` one-byte ranges near the end of the file,
    /// all of them really in the temporary file, holding the server's bytes), made from a real interrupted download
    /// so that its temporary file is the library's own.
    func tokenWithMaximumRanges(_ fixture: DownloadFixture, seed: UInt64) async throws -> ResumeToken {
        fixture.serve(.generated(length: Self.total, seed: seed))
        let base = try await fixture.interruptedToken(after: 64 << 10)
        // Ranges [p, p + 1) with one missing byte between them, ending two bytes before the end of the file.
        let first = Self.total - Int64(2 * Self.rangeLimit) - 2
        let ranges = (0..<Int64(Self.rangeLimit)).map { index in
            (first + 2 * index + 1)..<(first + 2 * index + 2)
        }
        let token = try base.listing(ranges, length: Self.total, seed: seed)
        // The reader takes it: it is a token a resume must honour.
        let decoded = try ResumeToken(jsonData: token.jsonData())
        try #require(decoded.completedRanges.count == Self.rangeLimit)
        for range in ranges.prefix(3) + ranges.suffix(3) {
            try expectSameBytes(readBytes(of: base.tempPath, in: range), serverBytes(seed: seed, in: range))
        }
        return decoded
    }

    /// Rule 2: a readable token, resumed with four connections and paused while they are held mid-body, must leave a
    /// token (and checkpoints) the library can read back. The first split leaves the three newcomers' bytes as ranges
    /// of their own beside the token's, so the schedule holds more ranges than a token may list, and every token it
    /// makes (each checkpoint, the pause's) lists them all: the reader refuses it ("lists more than 4096 ranges"),
    /// and with it the bytes in the file — after a crash, `resume` exits 65 and the download is lost.
    @Test("A paused resume of a token with the most ranges allowed leaves a token the library can read back")
    func pauseTokenStaysReadable() async throws {
        let fixture = try DownloadFixture()
        let seed: UInt64 = 1001
        let token = try await tokenWithMaximumRanges(fixture, seed: seed)
        // From now on every response holds after 16 KiB: the first gap's answer and the three newcomers'.
        let gate = BodyGate(holdingAfter: 16 << 10)
        defer { gate.open() }
        fixture.serve(.generated(length: Self.total, seed: seed, behavior: Behavior(gate: gate)))
        let checkpoints = Mutex<[ResumeToken]>([])
        var configuration = Segmented.configuration(.fixed(4))
        configuration.checkpointing = .init(interval: .milliseconds(1)) { token in
            checkpoints.withLock { $0.append(token) }
        }
        let task = try fixture.resumeThroughDisk(token, configuration: configuration)
        try #require(await gate.waitUntilHeld(count: 4, timeout: Waiting.deadline), "\(gate)")
        let path = token.tempPath
        let held = try await waitUntil {
            // The newcomers' first bytes are in the file (the preallocated zeros never match generated content).
            fixture.server.requests(for: Self.path).compactMap { askedRange($0, total: Self.total) }.dropFirst()
                .allSatisfy { range in
                    let written = range.lowerBound..<(range.lowerBound + (16 << 10))
                    return (try? readBytes(of: path, in: written)) == serverBytes(seed: seed, in: written)
                }
        }
        try #require(held)
        let paused = try #require(await task.cancelProducingResumeData())
        #expect(paused.completedRanges.count > Self.rangeLimit - 10, "the token's ranges are still listed")

        // Every byte the token lists is in the file (rule 2's other half) …
        for range in paused.presentRanges where range.count <= 1 << 20 {
            try expectSameBytes(
                readBytes(of: paused.tempPath, in: range), serverBytes(seed: seed, in: range), "\(range)")
        }
        // … and the token can be read back, as `resume` and another process must.
        var readable = true
        do {
            _ = try ResumeToken(jsonData: paused.jsonData())
        } catch {
            readable = false
            Issue.record(
                "the pause token lists \(paused.completedRanges.count) ranges and cannot be read back: \(error)")
        }
        let unreadable = checkpoints.withLock { $0 }.filter { (try? ResumeToken(jsonData: $0.jsonData())) == nil }
        let mostRanges = unreadable.map(\.completedRanges.count).max() ?? 0
        #expect(unreadable.count == 0, "\(unreadable.count) checkpoints cannot be read back (\(mostRanges) ranges)")
        // What a user would do with a readable token: resume it; the file must be exact.
        if readable {
            gate.open()
            let result = try await fixture.resumeThroughDisk(paused, configuration: Segmented.configuration(.fixed(4)))
                .value
            #expect(try fixture.file(result.fileURL, holds: Self.total, seed: seed))
        }
    }
}
