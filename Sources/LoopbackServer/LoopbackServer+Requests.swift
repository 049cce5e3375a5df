extension LoopbackServer {
    /// Every request seen (with a parseable head), in order of arrival; none when the server records none
    /// (`Configuration.recordsRequests`, set by `resumable serve`).
    public var requests: [RecordedRequest] {
        core.state.withLock { $0.requests }
    }

    /// The requests whose path (without query) equals `path`, in order.
    ///
    /// - Parameter path: The request path.
    /// - Returns: The matching requests.
    public func requests(for path: String) -> [RecordedRequest] {
        core.state.withLock { state in state.requests.filter { $0.path == path } }
    }

    /// Forgets all recorded requests.
    public func clearRequests() {
        core.state.withLock { $0.requests.removeAll() }
    }

    /// Waits until at least `count` requests to `path` have been recorded.
    ///
    /// - Parameters:
    ///   - count: The number of requests to wait for.
    ///   - path: The request path.
    ///   - timeout: The longest wait.
    /// - Returns: `true` when the count was reached, `false` on timeout or cancellation.
    public func waitForRequests(count: Int, path: String, timeout: Duration) async -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while true {
            if requests(for: path).count >= count { return true }
            if clock.now >= deadline || Task.isCancelled { return false }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
}
