import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Rate-limited downloads end to end against the loopback server, on both transports.
///
/// Only lower bounds on time are asserted exactly: `N` bytes through a limit of `R` bytes per second with a burst of
/// `B` take at least `(N − B) / R`, however loaded the machine. Upper bounds are generous (a test that would otherwise
/// wait for days must not), never tight.
@Suite("Rate-limited downloads")
struct RateLimitedDownloadTests {
    /// The least time `bytes` take through `limiter` from an idle start.
    static func minimumTime(_ bytes: Int, through limiter: RateLimiter) -> Duration {
        let rate = limiter.bytesPerSecond!
        let burst = TokenBucket(bytesPerSecond: rate).burstBytes!
        return TokenBucket.duration(TokenBucket.cost(bytes - burst, rate: rate))
    }

    static func configuration(
        _ limiters: [RateLimiter], connections: DownloadTask.Connections = .automatic
    ) -> DownloadTask.Configuration {
        var configuration = DownloadFixture.configuration()
        configuration.rateLimiters = limiters
        configuration.connections = connections
        return configuration
    }

    @Test("A limited download is byte-exact and not faster than the limit", arguments: TransportKind.all)
    func singleConnection(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 1_500_000)
        fixture.serve(.bytes(content))
        let limiter = RateLimiter(bytesPerSecond: 1_000_000)
        let clock = ContinuousClock()
        let start = clock.now
        let result = try await fixture.download(configuration: Self.configuration([limiter])).value
        let elapsed = clock.now - start
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(elapsed >= Self.minimumTime(content.count, through: limiter), "\(elapsed)")
        #expect(limiter.statistics.waits > 0)
        // libcurl calls on the transfer's thread, URLSession on its delivery queue: never inside a Swift task.
        #expect(limiter.statistics.waitsInsideSwiftTasks == 0)
    }

    @Test("All connections of a task share its limit", arguments: TransportKind.all)
    func segments(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: Int(Segmented.total))
        fixture.serve(.bytes(content))
        let limiter = RateLimiter(bytesPerSecond: 4 << 20)
        var configuration = Segmented.configuration(.fixed(4))
        configuration.rateLimiters = [limiter]
        let started = Atomic<Int>(0)
        configuration.eventHandler = { event in
            if case .segmentStarted = event { started.add(1, ordering: .relaxed) }
        }
        let clock = ContinuousClock()
        let start = clock.now
        let result = try await fixture.download(configuration: configuration).value
        let elapsed = clock.now - start
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(started.load(ordering: .relaxed) >= 3, "the download used several connections")
        #expect(elapsed >= Self.minimumTime(content.count, through: limiter), "\(elapsed)")
        #expect(limiter.statistics.waitsInsideSwiftTasks == 0)
    }

    @Test("A connection held by the limit is not a stalled one")
    func heldIsNotStalled() async throws {
        let fixture = try DownloadFixture(transport: .libcurl)
        let content = testBytes(count: 128 << 10)
        fixture.serve(.bytes(content))
        // Four connections of 32 KiB at 16 KiB/s: each waits about 4 s between its 16 KiB pieces, more than twice this
        // stall timeout; a stall timeout of a second keeps a busy machine's scheduling hiccups from looking like one.
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(4), stallTimeout: .seconds(1), events: events)
        configuration.minimumSegmentLength = 32 << 10
        configuration.rateLimiters = [RateLimiter(bytesPerSecond: 16 << 10)]
        let result = try await fixture.download(configuration: configuration).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        let failures = events.all.filter { if case .segmentFailed = $0 { true } else { false } }
        #expect(failures.isEmpty, "\(failures)")
        #expect(events.segmentsStarted.count == 3, "\(events.segmentsStarted)")
    }

    @Test("A limiter shared by two tasks limits their sum; each task's own limiter applies too")
    func sharedLimiter() async throws {
        let fixture = try DownloadFixture(transport: .libcurl)
        let first = testBytes(count: 1_000_000, seed: 1)
        let second = testBytes(count: 1_000_000, seed: 2)
        fixture.serve(.bytes(first), at: "/a.bin")
        fixture.serve(.bytes(second), at: "/b.bin")
        let global = RateLimiter(bytesPerSecond: 1_000_000)
        // The second task's own limit is above the global one: the global one decides.
        let own = RateLimiter(bytesPerSecond: 4_000_000)
        let clock = ContinuousClock()
        let start = clock.now
        let a = try fixture.download("/a.bin", configuration: Self.configuration([global]))
        let b = try fixture.download("/b.bin", configuration: Self.configuration([own, global]))
        async let resultA = a.value
        async let resultB = b.value
        let (doneA, doneB) = try await (resultA, resultB)
        let elapsed = clock.now - start
        try expectSameBytes(fixture.contents(of: doneA.fileURL), first)
        try expectSameBytes(fixture.contents(of: doneB.fileURL), second)
        // Either alone would take about 1 s; together they cannot beat 2 MB at 1 MB/s.
        #expect(elapsed >= Self.minimumTime(first.count + second.count, through: global), "\(elapsed)")
        #expect(global.statistics.waitsInsideSwiftTasks == 0)
    }

    @Test("Raising the limit from 1 B/s to none lets a running download finish", arguments: TransportKind.all)
    func raisedWhileRunning(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 2_000_000)
        fixture.serve(.bytes(content))
        let limiter = RateLimiter(bytesPerSecond: 1)
        let clock = ContinuousClock()
        let task = try fixture.download(configuration: Self.configuration([limiter]))
        // The first piece passed in the burst; the next one waits (for days at 1 B/s).
        #expect(try await waitUntil { limiter.waitingCount > 0 })
        let raised = clock.now
        limiter.bytesPerSecond = nil
        let result = try await task.value
        #expect(clock.now - raised < .seconds(300), "the wait at 1 B/s would take days")
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
    }

    @Test(
        "Pausing while a piece waits returns at once with a token for the bytes on disk", arguments: TransportKind.all)
    func pauseWhileWaiting(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 2_000_000)
        fixture.serve(.bytes(content))
        let limiter = RateLimiter(bytesPerSecond: 1)
        let task = try fixture.download(configuration: Self.configuration([limiter]))
        #expect(try await waitUntil { limiter.waitingCount > 0 })
        let clock = ContinuousClock()
        let pausedAt = clock.now
        let token = try #require(await task.cancelProducingResumeData())
        #expect(clock.now - pausedAt < .seconds(300), "the pause waited for the limit (days at 1 B/s)")
        #expect(await failure(of: task)?.code == .paused)
        // The piece that waited was written before its wait: the token covers it, and the file holds exactly that.
        #expect(token.offset > 0)
        let size = try FileManager.default.attributesOfItem(atPath: token.tempPath)[.size] as? NSNumber
        #expect(size?.int64Value == token.offset)
        #expect(limiter.waitingCount == 0)
        let result = try await fixture.resumeThroughDisk(token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(result.resumedAtOffset == token.offset)
    }
}
