import Foundation
import Synchronization

/// A bandwidth limit that downloads share: the body bytes of every download that lists it in
/// ``DownloadTask/Configuration/rateLimiters`` pass it, so together they never receive faster than
/// ``bytesPerSecond``.
///
/// Give one limiter to several downloads for a global limit, a limiter of its own to one download for a per-task
/// limit, or both: a download's bytes pass every limiter in its list. The rate can change at any time, also while
/// downloads run: a higher rate lets the bytes waiting go sooner, a lower one applies to the bytes that arrive after
/// the change.
///
/// The limit is smooth: after a pause in the traffic at most a burst of 50 ms worth of the rate (at least 16 KiB)
/// passes at once, and from then on the bytes follow the rate; over any stretch of time the bytes passed are at most
/// the rate times its length plus that burst. Connections that share a limiter are served in the order their bytes
/// arrive, so each gets its share.
///
/// A download waits for its limiters on the thread that received the bytes (the transfer's own thread with libcurl,
/// the session's delivery queue with `URLSession`), never on a thread of Swift's cooperative pool, so it holds the
/// server back through TCP as a slow disk would. Pausing or cancelling a download ends its wait within about 50 ms.
///
/// ```swift
/// let global = RateLimiter(bytesPerSecond: 2 << 20)  // 2 MiB/s for all downloads together
/// var configuration = DownloadTask.Configuration()
/// configuration.rateLimiters = [global]
/// // Later, while they run:
/// global.bytesPerSecond = nil  // unlimited
/// ```
public final class RateLimiter: Sendable {
    private struct State {
        var bucket: TokenBucket
        /// The deadline of every reservation still waiting, by waiter: moved when the rate rises.
        var waiters: [UInt64: ContinuousClock.Instant] = [:]
        var nextWaiter: UInt64 = 0
        var statistics = Statistics()
    }

    /// What a limiter did: for tests.
    struct Statistics: Hashable, Sendable {
        /// Reservations that had to wait.
        var waits = 0
        /// Waits that happened inside a Swift task, on the cooperative pool, where no thread may block: must be 0.
        var waitsInsideSwiftTasks = 0
    }

    /// The longest a waiting thread sleeps before it looks again at its deadline and at whether to stop.
    static let slice: Duration = .milliseconds(50)

    private let state: Mutex<State>

    /// A limiter of `bytesPerSecond` bytes per second; `nil`, zero or a negative value is unlimited.
    public init(bytesPerSecond: Int?) {
        state = Mutex(State(bucket: TokenBucket(bytesPerSecond: bytesPerSecond)))
    }

    /// The limit in bytes per second, `nil` for none; changeable at any time, also while downloads run.
    ///
    /// Setting `nil`, zero or a negative value removes the limit (reading it then gives `nil`). A higher rate lets
    /// the bytes already waiting go sooner, in proportion (at once when unlimited); a lower rate applies to the bytes
    /// that arrive after the change and never makes bytes already waiting wait longer.
    public var bytesPerSecond: Int? {
        get { state.withLock { $0.bucket.bytesPerSecond } }
        set {
            let now = ContinuousClock.now
            state.withLock { state in
                let rescaling = state.bucket.setRate(newValue, now: now)
                guard rescaling.kind != .unchanged else { return }
                for (waiter, deadline) in state.waiters {
                    state.waiters[waiter] = rescaling.apply(to: deadline)
                }
            }
        }
    }

    /// What the limiter did so far.
    var statistics: Statistics {
        state.withLock { $0.statistics }
    }

    /// How many threads wait for this limiter now.
    var waitingCount: Int {
        state.withLock { $0.waiters.count }
    }

    /// Lets `bytes` pass: blocks the calling thread until the limit allows them.
    ///
    /// Call it from a thread that may block (a transport's thread), never from an async context. The thread sleeps in
    /// slices of at most ``slice``; before each one it looks again at its deadline (which a rate change moves) and
    /// calls `shouldStop`, and returns as soon as that returns `true`. The bytes count against the limit either way.
    ///
    /// - Returns: How long the thread waited.
    @discardableResult
    func waitForPermission(_ bytes: Int, shouldStop: () -> Bool) -> Duration {
        let start = ContinuousClock.now
        let insideTask = withUnsafeCurrentTask { $0 != nil }
        let waiter = state.withLock { state -> UInt64? in
            let wait = state.bucket.reserve(bytes, now: start)
            guard wait > .zero else { return nil }
            state.statistics.waits += 1
            if insideTask { state.statistics.waitsInsideSwiftTasks += 1 }
            let waiter = state.nextWaiter
            state.nextWaiter &+= 1
            state.waiters[waiter] = start.advanced(by: wait)
            return waiter
        }
        guard let waiter else { return .zero }
        defer { state.withLock { _ = $0.waiters.removeValue(forKey: waiter) } }
        while true {
            let now = ContinuousClock.now
            guard let deadline = state.withLock({ $0.waiters[waiter] }), deadline > now, !shouldStop() else { break }
            let nap = min(deadline - now, Self.slice)
            let (seconds, attoseconds) = nap.components
            Thread.sleep(forTimeInterval: Double(seconds) + Double(attoseconds) / 1e18)
        }
        return ContinuousClock.now - start
    }
}
