import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Commit 16552e4: a multi-connection phase that never brought the floor (64 KiB) by itself counts as having brought
/// nothing. A legitimate server that serves one connection per client (nginx `limit_conn 1`, 503 beyond it) behind a
/// link that cuts every connection after 48 KiB: one connection finishes (48 KiB per failure, two failures bring the
/// floor: FlakyLinkProgressAttackTests). With `.fixed(4)`, every answer starts a phase: its three other segments are
/// turned away (503) while the first answer is still arriving, the count comes down to that answer, which reads on
/// and is cut after 48 KiB: the last connection, so the phase ends `.retry` with 48 KiB, under its floor. The engine
/// now counts it as a failure that brought 0 bytes: after six such phases the download fails, though each brought
/// 48 KiB exactly as the single connection's answers do (before 16552e4 they added up, and it finished).
@Suite("Attack (4th round): one connection per client through a flaky link, with several connections")
struct OneConnectionPerClientFlakyLinkAttackTests {
    static let path = Segmented.path
    static let total: Int64 = 2 << 20
    static let cut: Int64 = 48 << 10

    @Test("503 beyond one connection, every answer cut after 48 KiB: .fixed(4) still finishes, as .single does")
    func oneConnectionPerClientThroughFlakyLink() async throws {
        let fixture = try DownloadFixture()
        let seed: UInt64 = 6802
        fixture.serve(
            .generated(
                length: Self.total, seed: seed, behavior: Behavior(dropAfterBytes: Self.cut),
                concurrencyLimit: ConcurrencyLimit(maximum: 1, retryAfter: "0")))
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(4), retries: 5, events: events)
        configuration.retry = .init(maximumRetries: 5, initialDelay: .milliseconds(1), maximumDelay: .milliseconds(1))
        configuration.deadline = .seconds(300)
        // Each answer that the engine asks for is held after 16 KiB until the other segments of its phase were turned
        // away (as over any link slower than a 503), then cut after 48 KiB.
        var gate = BodyGate(holdingAfter: 16 << 10)
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: Self.cut, gate: gate), for: Self.path)
        let task = try fixture.download(configuration: configuration)
        let finished = Mutex<Result<DownloadResult, ResumableError>?>(nil)
        let waiter = Task {
            let result = await task.result
            finished.withLock { $0 = result }
        }
        var started = 0
        for _ in 0..<200 {
            try #require(try await waitUntil { gate.heldCount > 0 || finished.withLock { $0 != nil } })
            if finished.withLock({ $0 != nil }) { break }
            let start = fixture.server.requests(for: Self.path).last { !$0.wasOverloaded }?.rangeStart ?? 0
            // Only the first answer starts a phase: once the server pushed it down to one connection, the task opens no
            // more than that (DownloadEngine.State.connectionCeiling), so later answers run alone.
            if started == 0, Self.total - start >= 2 * Segmented.minimumSegment {
                // A phase starts from this answer: its other connections are all turned away while it is held.
                try #require(
                    try await waitUntil {
                        let now = events.segmentsStarted.count
                        return now > started && events.segmentsFailed.count { $0.error.httpStatus == 503 } == now
                    })
                started = events.segmentsStarted.count
            }
            let held = gate
            gate = BodyGate(holdingAfter: 16 << 10)
            fixture.server.enqueue(behavior: Behavior(dropAfterBytes: Self.cut, gate: gate), for: Self.path)
            held.open()
        }
        gate.open()
        await waiter.value
        let requests = fixture.server.requests(for: Self.path).count
        #expect(events.segmentsStarted.count == started, "a later request started another phase")
        switch try #require(finished.withLock { $0 }) {
        case .success(let done):
            #expect(try fixture.file(done.fileURL, holds: Self.total, seed: seed))
        case .failure(let error):
            let message =
                "failed after \(requests) requests, \(error.resumeToken?.offset ?? -1) bytes kept, though every phase "
                + "brought 48 KiB: \(error)"
            Issue.record("\(message)")
        }
    }
}
