extension LoopbackServer {
    /// How many requests for `path` are in flight now: head read, response not yet written to the end.
    ///
    /// `path` is the path a resource is registered at, or for other requests the raw request path. See
    /// ``ConcurrencyLimit`` for what counts.
    ///
    /// - Parameter path: The path.
    /// - Returns: The number of requests being served now.
    public func concurrentRequests(for path: String) -> Int {
        core.state.withLock { $0.concurrency[path]?.inFlight ?? 0 }
    }

    /// The most requests for `path` that were in flight at the same time since the server started (or since
    /// ``resetConcurrencyCounters(for:)``); requests turned away by a ``ConcurrencyLimit`` are not counted.
    ///
    /// ```swift
    /// #expect(server.peakConcurrentRequests(for: "/file.bin") == 4)  // four segments really overlapped
    /// ```
    ///
    /// - Parameter path: The path.
    /// - Returns: The peak concurrency.
    public func peakConcurrentRequests(for path: String) -> Int {
        core.state.withLock { $0.concurrency[path]?.peak ?? 0 }
    }

    /// How many requests for `path` were turned away by a ``ConcurrencyLimit`` since the server started (or since
    /// ``resetConcurrencyCounters(for:)``).
    ///
    /// - Parameter path: The path.
    /// - Returns: The number of overload answers sent (or being sent).
    public func overloadAnswers(for path: String) -> Int {
        core.state.withLock { $0.concurrency[path]?.overloads ?? 0 }
    }

    /// Starts counting afresh for `path`: the peak becomes the number in flight now, and the overload answers 0.
    ///
    /// - Parameter path: The path.
    public func resetConcurrencyCounters(for path: String) {
        core.state.withLock { state in
            guard var counters = state.concurrency[path] else { return }
            counters.peak = counters.inFlight
            counters.overloads = 0
            state.concurrency[path] = counters
        }
    }

    /// Waits until at least `count` requests for `path` are in flight at the same time.
    ///
    /// Polls every 5 ms on `Task.sleep`, so it never blocks a thread.
    ///
    /// - Parameters:
    ///   - count: The number of requests in flight to wait for.
    ///   - path: The path.
    ///   - timeout: The longest wait.
    /// - Returns: `true` once they are in flight; `false` on timeout or cancellation.
    public func waitForConcurrentRequests(count: Int, path: String, timeout: Duration) async -> Bool {
        await waitForConcurrency(path: path, timeout: timeout) { $0 >= count }
    }

    /// Waits until no request for `path` is in flight.
    ///
    /// - Parameters:
    ///   - path: The path.
    ///   - timeout: The longest wait.
    /// - Returns: `true` once none is in flight; `false` on timeout or cancellation.
    public func waitUntilIdle(path: String, timeout: Duration) async -> Bool {
        await waitForConcurrency(path: path, timeout: timeout) { $0 == 0 }
    }

    private func waitForConcurrency(path: String, timeout: Duration, until condition: (Int) -> Bool) async -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while true {
            if condition(concurrentRequests(for: path)) { return true }
            if clock.now >= deadline || Task.isCancelled { return false }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
}
