import Dispatch
import Foundation
import Testing

@testable import Resumable

/// Review by helper 101 of a5b4f80's `IdleWatchdog` (the URLSession transport's idle timeout on body bytes).
///
/// **Failed on a5b4f80 with URLSession.** Rule 2 (nothing downloaded is lost without need) and docs/cli.md
/// `--timeout` ("a stall without data"): data never stopped flowing, yet connections timed out. Four connections
/// fetched 128 KiB (32 KiB each) under a rate limit of 16 KiB/s with an idle timeout of 1.5 s, the server holding each
/// answer after its head until all four heads were out. The four requests of one download share one `URLSession`,
/// whose delegate queue is serial: while one connection's piece waits for the limit (the engine blocks in the
/// consumer call), the other connections' pieces, already received, wait behind it. `TransferActivity` counted only
/// the connection whose consumer ran as busy, so a connection whose piece was fourth in line looked idle for 2 s, and
/// its watchdog cancelled it with `timedOut` although its bytes sat in memory the whole time.
///
/// That end-to-end test (helper 101's, 60d875e) is not kept: its gates are a real stall between a connection's head and
/// its body, which a loaded machine stretched past any idle timeout (a parallel run failed it on both transports, once
/// through FoundationNetworking's own timer). Its two causes are tested here on `TransferActivity` itself, without
/// a clock: a request is never idle while any delivery of its session runs, and its idle time counts from the
/// session's last delivery. (For a while this stop the clock started with the first body bytes instead, to keep a
/// gate's stall after the head out of it; helper 102 proved that an empty chunked body with trailers trickled forever
/// then never timed out, `IdleClockReviewTests`: a stall after the head is a stall.)
@Suite("Review of a5b4f80: the URLSession idle watchdog")
struct IdleWatchdogReviewTests {
    /// A moment `seconds` after `base`.
    static func after(_ seconds: Double, _ base: DispatchTime) -> DispatchTime {
        base + .nanoseconds(Int(seconds * 1e9))
    }

    @Test("A request is not idle while another request of its session delivers, and counts from that delivery")
    func sessionDeliveriesCount() {
        let session = TransferActivity()
        let waiting = TransferActivity(session: session)
        let limited = TransferActivity(session: session)
        waiting.begin()
        waiting.end()
        // Its own last delivery is at least 50 ms older than the session's below (a sleep only orders the two marks;
        // no assertion waits on it).
        Thread.sleep(forTimeInterval: 0.05)
        let start = DispatchTime.now()
        // The other connection's piece waits for the rate limit: the delegate queue is busy, nothing is idle.
        limited.begin()
        #expect(waiting.idle(at: Self.after(10, start)) == nil)
        limited.end()
        let ended = DispatchTime.now()
        // Idle from the session's last delivery (at most `ended`), not from its own (50 ms earlier).
        let idle = waiting.idle(at: Self.after(1, ended)) ?? 0
        #expect(idle >= 1_000_000_000 && idle < 1_025_000_000, "\(idle) ns")
    }

    @Test("A request's clock starts with its head; while the session delivers elsewhere it is not idle")
    func headStartsTheClock() {
        let session = TransferActivity()
        let request = TransferActivity(session: session)
        #expect(request.idle(at: Self.after(3600, .now())) == nil, "nothing delivered yet")
        request.begin()
        #expect(request.idle(at: Self.after(3600, .now())) == nil, "busy in its consumer")
        request.end()
        // The head alone starts it: a body that never comes (an empty chunked body whose trailers never end) is idle.
        #expect((request.idle(at: Self.after(2, .now())) ?? 0) >= 2_000_000_000)
        let other = TransferActivity(session: session)
        other.begin()
        #expect(request.idle(at: Self.after(3600, .now())) == nil, "another request of the session delivers")
        other.end()
    }

    @Test("A request without a session is idle from its own last delivery")
    func withoutSession() {
        let request = TransferActivity()
        #expect(request.idle(at: .now()) == nil)
        request.begin()
        request.end()
        let now = DispatchTime.now()
        #expect((request.idle(at: Self.after(7, now)) ?? 0) >= 7_000_000_000)
        #expect((request.idle(at: Self.after(7, now)) ?? .max) < 8_000_000_000)
    }
}
