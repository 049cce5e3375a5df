import Foundation

extension LoopbackServer {
    /// Registers `resource` at `path`, replacing any resource already there.
    ///
    /// - Parameters:
    ///   - resource: The resource.
    ///   - path: The request path, e.g. `"/file.bin"` (matched against the raw path, then the percent-decoded one).
    public func register(_ resource: Resource, at path: String) {
        core.state.withLock { $0.resources[path] = resource }
    }

    /// Removes the resource at `path`, if any.
    ///
    /// - Parameter path: The request path.
    public func removeResource(at path: String) {
        _ = core.state.withLock { $0.resources.removeValue(forKey: path) }
    }

    /// The resource registered at `path`, if any.
    ///
    /// - Parameter path: The request path.
    /// - Returns: The resource.
    public func resource(at path: String) -> Resource? {
        core.state.withLock { $0.resources[path] }
    }

    /// Serves regular files under `directory` for GET and HEAD paths that have no registered resource.
    ///
    /// Paths are percent-decoded strictly; `..` segments, escaping symbolic links and malformed escapes get 403,
    /// anything that is not a regular file gets 404, and so does a hidden path: one with a segment starting with
    /// `.` (`/.env`, `/sub/.x/file`), or one a symbolic link leads to. Files get a strong ETag
    /// `"<hex size>-<hex mtime nanoseconds>-<hex inode>"`, `Last-Modified` from the modification time and
    /// `Content-Type: application/octet-stream`, and are read with `pread` in chunks.
    ///
    /// - Parameter directory: The root directory.
    public func serveFiles(from directory: URL) {
        core.state.withLock { $0.staticRoot = directory }
    }

    /// Stops serving files from a directory (see ``serveFiles(from:)``).
    public func stopServingFiles() {
        core.state.withLock { $0.staticRoot = nil }
    }

    /// Queues a raw response: the next request to `path` gets it, then normal handling resumes (FIFO).
    ///
    /// - Parameters:
    ///   - response: The response, sent exactly as given.
    ///   - path: The request path.
    public func enqueue(_ response: ScriptedResponse, for path: String) {
        core.state.withLock { $0.queues[path, default: []].append(.scripted(response)) }
    }

    /// Queues a one-shot behavior: the next request to `path` is served from its resource with `behavior` instead
    /// of the resource's own (FIFO, same queue as scripted responses). A request that matches a one-shot keyed by
    /// its range start (``enqueue(behavior:for:whenRangeStartsAt:)``) takes that one instead and leaves this queue
    /// alone.
    ///
    /// - Parameters:
    ///   - behavior: The behavior for one request.
    ///   - path: The request path.
    public func enqueue(behavior: Behavior, for path: String) {
        core.state.withLock { $0.queues[path, default: []].append(.behavior(behavior)) }
    }

    /// Queues a one-shot behavior for one segment: the first request to `path` whose `Range` asks for a single
    /// range starting at byte `first` (`bytes=first-last` or `bytes=first-`) is served with `behavior` instead of
    /// the resource's own.
    ///
    /// Requests for other ranges (or with no, several or suffix ranges) are unaffected and do not consume it, so
    /// a test can pick out one segment among requests arriving in parallel in any order. A request that matches
    /// takes it in place of the FIFO queue of ``enqueue(behavior:for:)``, which it leaves untouched; several
    /// behaviors queued for the same start are taken in order, one per matching request. A ``BodyGate`` in
    /// `behavior` holds only the request that takes it; ``Behavior/ignoreRange`` makes that one segment get a 200
    /// with the whole body.
    ///
    /// ```swift
    /// let gate = BodyGate(holdingAfter: 1000)
    /// server.enqueue(behavior: Behavior(gate: gate), for: "/file.bin", whenRangeStartsAt: 1_048_576)
    /// ```
    ///
    /// - Parameters:
    ///   - behavior: The behavior for that one request.
    ///   - path: The request path.
    ///   - first: The first byte of the range to match.
    public func enqueue(behavior: Behavior, for path: String, whenRangeStartsAt first: Int64) {
        core.state.withLock { $0.rangeQueues[path, default: [:]][first, default: []].append(.behavior(behavior)) }
    }

    /// Queues a raw response for one segment: the first request to `path` whose `Range` asks for a single range
    /// starting at byte `first` gets it (see ``enqueue(behavior:for:whenRangeStartsAt:)`` for the matching rules).
    ///
    /// ```swift
    /// server.enqueue(ScriptedResponse(status: 500, text: "boom"), for: "/file.bin", whenRangeStartsAt: 0)
    /// ```
    ///
    /// - Parameters:
    ///   - response: The response, sent exactly as given.
    ///   - path: The request path.
    ///   - first: The first byte of the range to match.
    public func enqueue(_ response: ScriptedResponse, for path: String, whenRangeStartsAt first: Int64) {
        core.state.withLock { $0.rangeQueues[path, default: [:]][first, default: []].append(.scripted(response)) }
    }

    /// Removes every queued one-shot response and behavior for `path`, those keyed by a range start included.
    ///
    /// - Parameter path: The request path.
    public func clearQueue(for path: String) {
        core.state.withLock { state in
            state.queues.removeValue(forKey: path)
            state.rangeQueues.removeValue(forKey: path)
        }
    }

    /// The number of one-shot responses and behaviors still queued for `path`, those keyed by a range start
    /// included.
    ///
    /// - Parameter path: The request path.
    /// - Returns: The queue length.
    public func queuedCount(for path: String) -> Int {
        core.state.withLock { state in
            (state.queues[path]?.count ?? 0) + (state.rangeQueues[path]?.values.reduce(0) { $0 + $1.count } ?? 0)
        }
    }

    /// The number of one-shot responses and behaviors still queued for `path` and the range start `first`.
    ///
    /// - Parameters:
    ///   - path: The request path.
    ///   - first: The range start they are keyed by.
    /// - Returns: The queue length; 0 once the matching requests took them.
    public func queuedCount(for path: String, whenRangeStartsAt first: Int64) -> Int {
        core.state.withLock { $0.rangeQueues[path]?[first]?.count ?? 0 }
    }
}
