import Foundation
import Synchronization

/// Fans a download's events out to any number of `AsyncStream` subscribers.
///
/// A task starts when it is created, so a subscriber can arrive after the first events were sent. Every
/// subscriber therefore first gets the events so far (all but progress, which is replaced by the latest
/// progress only), then live events, so none of `started`, `resumed`, `reconciled`, `restarted`,
/// `retrying` or `finished` is lost to a race.
final class EventHub: Sendable {
    private struct State {
        var subscribers: [Int: AsyncStream<DownloadEvent>.Continuation] = [:]
        var nextID = 0
        var finished = false
        var history: [DownloadEvent] = []
        var latestProgress: DownloadProgress?
    }

    /// How many non-progress events are kept for late subscribers (retries could otherwise grow it).
    static let historyLimit = 256

    private let state = Mutex(State())
    private let handler: (@Sendable (DownloadEvent) -> Void)?

    /// A hub that also calls `handler` with every event, in order, before any subscriber sees it.
    init(handler: (@Sendable (DownloadEvent) -> Void)? = nil) {
        self.handler = handler
    }

    /// A stream of every event so far (progress as the latest value only), then of live events.
    func subscribe() -> AsyncStream<DownloadEvent> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: DownloadEvent.self,
            bufferingPolicy: .bufferingNewest(Self.historyLimit + 64)
        )
        let id: Int? = state.withLock { state in
            for event in state.history {
                if case .finished = event, let latest = state.latestProgress { continuation.yield(.progress(latest)) }
                continuation.yield(event)
            }
            if !state.finished, let latest = state.latestProgress { continuation.yield(.progress(latest)) }
            guard !state.finished else { return nil }
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = continuation
            return id
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { _ = $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// The last progress sent, if any.
    var latestProgress: DownloadProgress? {
        state.withLock { $0.latestProgress }
    }

    func send(_ event: DownloadEvent) {
        // Outside the lock: the handler may call back into the task (for example to read `events`).
        handler?(event)
        // Yield under the lock, so a subscriber never sees a live event before the history it follows.
        state.withLock { state in
            if case .progress(let progress) = event {
                state.latestProgress = progress
            } else if state.history.count < Self.historyLimit {
                state.history.append(event)
            }
            for subscriber in state.subscribers.values { subscriber.yield(event) }
        }
    }

    func finish() {
        let subscribers = state.withLock { state in
            state.finished = true
            defer { state.subscribers.removeAll() }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.finish() }
    }
}
