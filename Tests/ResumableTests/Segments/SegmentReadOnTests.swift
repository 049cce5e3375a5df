import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Adversarial review of 792eda2 and 02affc2 (the read-on into unclaimed bytes, and the engine writing the rest of a
/// piece cut at a connection's end when the read-on moved that end meanwhile), found by helper 63.
@Suite("Read-on into unclaimed bytes end to end: servers allowing one or two connections per client")
struct SegmentReadOnTests {
    static let path = Segmented.path
    static let total = Segmented.total

    final class Seen: Sendable {
        private let state = Mutex<(tokens: Int, listed: Int64, problems: [String], transferred: Int64)>((0, 0, [], 0))
        func record(listed: Int64, problems: [String]) {
            state.withLock {
                $0.tokens += 1
                $0.listed = max($0.listed, listed)
                $0.problems += problems
            }
        }
        func progress(_ transferred: Int64) { state.withLock { $0.transferred = max($0.transferred, transferred) } }
        var tokens: Int { state.withLock { $0.tokens } }
        var listed: Int64 { state.withLock { $0.listed } }
        var problems: [String] { state.withLock { $0.problems } }
        var transferred: Int64 { state.withLock { $0.transferred } }
    }

    struct Variant: Sendable, CustomTestStringConvertible {
        var count: Int
        var pieces: Bool
        var limited: Bool
        var testDescription: String { "fixed(\(count)) pieces:\(pieces) limited:\(limited)" }
    }

    static let variants: [Variant] = [2, 4, 8, 16].flatMap { count in
        [(false, false), (true, false), (false, true), (true, true)].map {
            Variant(count: count, pieces: $0.0, limited: $0.1)
        }
    }

    /// One connection per client (403 beyond it): every segment is turned away while the first answer is held, the
    /// first answer reads on past its share. The gate then lets it cross its old end in steps; every checkpoint
    /// lists only the server's bytes, the file is the server's, the progress counts each byte once.
    @Test(
        "One connection per client: the first answer reads on across its old end; tokens, file, progress are right",
        arguments: variants, TransportKind.all)
    func readOnAcrossOldEnd(variant: Variant, transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let seed: UInt64 = 6300 + UInt64(variant.count)
        let gate = BodyGate(holdingAfter: 64 << 10)
        fixture.serve(
            .generated(
                length: Self.total, seed: seed, behavior: Behavior(gate: gate),
                concurrencyLimit: ConcurrencyLimit(maximum: 1, status: 403)))
        let tokenFile = fixture.directory.url.appendingPathComponent("checkpoint.json")
        var checkpointing = DownloadTask.Checkpointing.file(tokenFile, interval: .milliseconds(10))
        let write = checkpointing.handler
        let seen = Seen()
        checkpointing.handler = { token in
            try write(token)
            var problems: [String] = []
            for range in token.presentRanges {
                if try readBytes(of: token.tempPath, in: range) != serverBytes(seed: seed, in: range) {
                    problems.append("bytes \(range) of the token's file are not the server's")
                }
            }
            seen.record(
                listed: token.presentRanges.reduce(0) { $0 + $1.upperBound - $1.lowerBound }, problems: problems)
        }
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(variant.count), retries: 0, events: events)
        configuration.checkpointing = checkpointing
        let handler = configuration.eventHandler
        configuration.eventHandler = { event in
            handler?(event)
            if case .progress(let progress) = event { seen.progress(progress.bytesTransferred) }
        }
        if variant.pieces {
            var digest = PortableSHA256()
            digest.update(testBytes(count: Int(Self.total), seed: seed))
            configuration.expectedSHA256 = digest.hexDigest()
        }
        if variant.limited { configuration.rateLimiters = [RateLimiter(bytesPerSecond: 64 << 20)] }
        let download = try fixture.download(configuration: configuration)
        defer { download.cancel() }
        #expect(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
        let others = variant.count - 1
        #expect(try await waitUntil { events.segmentsFailed.count == others }, "\(events.segmentsFailed)")
        // Across the old end of the first answer, in odd steps, with checkpoints between.
        let oldEnd = Self.total / Int64(variant.count)
        var limit: Int64 = 64 << 10
        while limit < oldEnd + (300 << 10) {
            let step: Int64 = 77_777
            gate.advance(by: step)
            limit += step
            let reached = limit
            _ = try await waitUntil(timeout: .seconds(5)) { seen.listed >= reached - 2 * step }
        }
        gate.open()
        switch await download.result {
        case .success(let result):
            #expect(try fixture.file(result.fileURL, holds: Self.total, seed: seed))
        case .failure(let error):
            Issue.record("failed: \(error); requests: \(fixture.ranges())")
        }
        #expect(seen.problems.isEmpty, "\(seen.problems)")
        #expect(seen.tokens > 0)
        #expect(seen.transferred <= Self.total, "bytes counted twice: \(seen.transferred) of \(Self.total)")
        #expect(fixture.ranges().count == variant.count, "\(fixture.ranges())")
    }

    /// Two connections per client, pieces with a digest and a rate limiter: segments (206s, framed by length) are
    /// capped and turned away in turn, connections read on into their old ranges; the file is right and the digest
    /// matches.
    @Test(
        "Two connections per client, pieces, digest, limiter: the file is right",
        arguments: [4, 8, 16], TransportKind.all)
    func twoPerClientPieces(count: Int, transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport, keepAlive: true)
        let seed: UInt64 = 6390 + UInt64(count)
        let gate = BodyGate(holdingAfter: 64 << 10)
        fixture.serve(
            .generated(
                length: Self.total, seed: seed, behavior: Behavior(gate: gate),
                concurrencyLimit: ConcurrencyLimit(maximum: 2, status: 403)))
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(count), retries: 3, events: events)
        var digest = PortableSHA256()
        digest.update(testBytes(count: Int(Self.total), seed: seed))
        configuration.expectedSHA256 = digest.hexDigest()
        configuration.rateLimiters = [RateLimiter(bytesPerSecond: 64 << 20)]
        let download = try fixture.download(configuration: configuration)
        defer { download.cancel() }
        #expect(await gate.waitUntilHeld(count: 2, timeout: Waiting.deadline), "\(gate)")
        #expect(try await waitUntil { events.segmentsFailed.count >= 1 })
        _ = try await trickle(gate, bodyLength: Self.total, step: 50_000, timeout: .seconds(3)) { false }
        gate.open()
        switch await download.result {
        case .success(let result):
            #expect(try fixture.file(result.fileURL, holds: Self.total, seed: seed))
        case .failure(let error):
            Issue.record("failed: \(error); requests: \(fixture.ranges())")
        }
    }
}
