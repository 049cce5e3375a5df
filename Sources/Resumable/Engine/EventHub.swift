import Foundation
import Synchronization

/// Fans a download's events out to any number of `AsyncStream` subscribers.
final class EventHub: Sendable {
    private struct State {
        var subscribers: [Int: AsyncStream<DownloadEvent>.Continuation] = [:]
        var nextID = 0
        var finished = false
        var latestProgress: DownloadProgress?
    }

    private let state = Mutex(State())

    /// A new stream of events from now on; it starts with the latest progress, if any.
    func subscribe() -> AsyncStream<DownloadEvent> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: DownloadEvent.self, bufferingPolicy: .bufferingNewest(256))
        let id: Int? = state.withLock { state in
            if let latest = state.latestProgress { continuation.yield(.progress(latest)) }
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

    func send(_ event: DownloadEvent) {
        let subscribers = state.withLock { state in
            if case .progress(let progress) = event { state.latestProgress = progress }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.yield(event) }
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
