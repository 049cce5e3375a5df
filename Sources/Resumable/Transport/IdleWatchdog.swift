import Dispatch
import Synchronization

/// When a request last moved data to its consumer: the head, or body bytes. Read by an ``IdleWatchdog`` on its own
/// queue, written by the request's callbacks; one atomic word, so a body piece costs two stores.
///
/// The clock starts with the head: after it, only body bytes are data (FoundationNetworking's own timer is re-armed
/// by every trailer line, so a body that never comes, or never ends, is this watchdog's to end). A server that holds
/// its body back after the head has stalled, as it has for the libcurl transport.
///
/// A request's callbacks share the session's serial delegate queue with the other requests of the session (the
/// connections of one download): while one of them waits in its consumer (a rate limit, a slow disk), the others'
/// pieces, received long ago, wait behind it. So a request made with `session` (the session's own activity, which
/// every delivery marks too) is not idle while any delivery of the session runs, and its idle time counts from the
/// last delivery of the session, not only from its own.
final class TransferActivity: Sendable {
    /// Nothing reached the consumer yet.
    private static let notStarted: UInt64 = 0
    /// The consumer is busy with a delivery now (a rate limit or a slow disk may hold it): not idle, however long.
    private static let busy = UInt64.max

    private let mark = Atomic<UInt64>(TransferActivity.notStarted)
    /// The session's activity, marked by every delivery of every request of the session.
    private let session: TransferActivity?

    init(session: TransferActivity? = nil) {
        self.session = session
    }

    /// A delivery to the consumer starts.
    func begin() {
        mark.store(Self.busy, ordering: .releasing)
        session?.begin()
    }

    /// A delivery to the consumer ended: the request and its session were active now.
    func end() {
        let now = max(DispatchTime.now().uptimeNanoseconds, 1)
        mark.store(now, ordering: .releasing)
        session?.mark.store(now, ordering: .releasing)
    }

    /// How long the request has been idle at `now`: nil while nothing reached its consumer yet, or while a delivery
    /// (of the session) is under way.
    func idle(at now: DispatchTime) -> UInt64? {
        let last = mark.load(ordering: .acquiring)
        guard last != Self.notStarted, last != Self.busy else { return nil }
        var latest = last
        if let session {
            let shared = session.mark.load(ordering: .acquiring)
            if shared == Self.busy { return nil }
            latest = max(latest, shared)
        }
        return now.uptimeNanoseconds &- min(latest, now.uptimeNanoseconds)
    }
}

/// Runs an action once when a request's ``TransferActivity`` shows no data for `timeout`: the URLSession transport's
/// idle timeout once the head has arrived, whatever FoundationNetworking's own timer makes of trailer fields (it
/// re-arms on every header line). Before the head, the ``ConnectWatchdog`` and FoundationNetworking's timer bound the
/// wait. A one-shot timer that sets itself again for the moment the timeout would pass: nothing runs per body piece.
final class IdleWatchdog: @unchecked Sendable {
    // @unchecked: a dispatch source may be scheduled, resumed and cancelled from any thread; the rest is immutable.
    private let timer: DispatchSourceTimer
    private let activity: TransferActivity
    private let nanoseconds: UInt64
    private let action: @Sendable () -> Void

    init(timeout: Duration, activity: TransferActivity, action: @escaping @Sendable () -> Void) {
        self.activity = activity
        nanoseconds = UInt64(URLSessionTransport.timeoutInterval(timeout) * 1e9)
        self.action = action
        timer = DispatchSource.makeTimerSource(queue: .global())
        timer.setEventHandler { [weak self] in self?.fire() }
        timer.schedule(deadline: .now() + .nanoseconds(Int(clamping: nanoseconds)))
        timer.resume()
    }

    deinit {
        timer.cancel()
    }

    /// Stops the timer; the action will not run if it has not started.
    func cancel() {
        timer.cancel()
    }

    private func fire() {
        let now = DispatchTime.now()
        guard let idle = activity.idle(at: now) else {
            // Not started, or the consumer is busy: look again a timeout later.
            timer.schedule(deadline: now + .nanoseconds(Int(clamping: nanoseconds)))
            return
        }
        if idle >= nanoseconds {
            timer.cancel()
            action()
        } else {
            timer.schedule(deadline: now + .nanoseconds(Int(clamping: nanoseconds - idle)))
        }
    }
}
