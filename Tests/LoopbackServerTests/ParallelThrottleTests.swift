import Foundation
import LoopbackServer
import Testing

/// Throttling is per response (nginx `limit_rate`): parallel responses each get the whole rate.
///
/// The bounds are loose on purpose. A response cannot beat its schedule, so the lower bounds are exact; the upper
/// bound only has to tell "each at the full rate" (2 s here) from "the rate shared" (4× or 16× that).
@Suite("Per-request throttling under parallel load")
struct ParallelThrottleTests {
    static let rate = 20_000
    static let size: Int64 = 40_000
    /// One response at the full rate: 2 s.
    static let single = Duration.seconds(Double(size) / Double(rate))
    /// The first piece (a twentieth of a second's worth) goes out at once.
    static let piece = Int64(rate / 20)

    @Test(
        "Parallel throttled responses each take size/rate, not a multiple of it",
        arguments: [(4, false), (16, true)])
    func eachGetsTheRate(count: Int, serverWide: Bool) async throws {
        let gate = BodyGate(holdingAfter: 0)
        let server = try LoopbackServer(
            configuration: .init(throttleBytesPerSecond: serverWide ? Self.rate : nil))
        defer { server.shutdown() }
        let behavior = Behavior(throttleBytesPerSecond: serverWide ? nil : Self.rate, gate: gate)
        server.register(.generated(length: Self.size, seed: 31, behavior: behavior), at: "/t")
        let tasks = (0..<count).map { _ in ParallelClients.start(port: server.port, path: "/t") }
        // All are in flight before any body byte goes out.
        #expect(await gate.waitUntilHeld(count: count))
        #expect(server.peakConcurrentRequests(for: "/t") == count)
        let opened = ContinuousClock.now
        gate.open()

        let content = Resource.generatedBytes(seed: 31, range: 0..<Self.size)
        let earliest = Duration.seconds(Double(Self.size - Self.piece) / Double(Self.rate))
        var latest = Duration.zero
        for task in tasks {
            let timed = try await task.value
            expectSameBytes(timed.response.body, content)
            let elapsed = timed.finished - opened
            #expect(elapsed >= earliest, "throttled: \(elapsed)")
            latest = max(latest, elapsed)
        }
        #expect(latest < Self.single + .milliseconds(2500), "each at the full rate, not shared: \(latest)")
    }

    @Test("Time held at a gate mid-body is not made up in a burst afterwards")
    func noBurstAfterHold() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = BodyGate(holdingAfter: 10_000)
        server.register(
            .generated(length: 30_000, seed: 32, behavior: Behavior(throttleBytesPerSecond: Self.rate, gate: gate)),
            at: "/t")
        let task = ParallelClients.start(port: server.port, path: "/t")
        #expect(await gate.waitUntilHeld())
        // The hold outlasts the whole body's schedule (1.5 s), so a response that caught up would end at once.
        try await Task.sleep(for: .seconds(2))
        let opened = ContinuousClock.now
        gate.open()
        let timed = try await task.value
        expectSameBytes(timed.response.body, Resource.generatedBytes(seed: 32, range: 0..<30_000))
        let remaining = Duration.seconds(Double(20_000 - Self.piece) / Double(Self.rate))
        #expect(timed.finished - opened >= remaining)
    }
}
