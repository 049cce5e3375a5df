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
    /// anything that is not a regular file gets 404. Files get a strong ETag
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
    /// of the resource's own (FIFO, same queue as scripted responses).
    ///
    /// - Parameters:
    ///   - behavior: The behavior for one request.
    ///   - path: The request path.
    public func enqueue(behavior: Behavior, for path: String) {
        core.state.withLock { $0.queues[path, default: []].append(.behavior(behavior)) }
    }

    /// Removes every queued one-shot response and behavior for `path`.
    ///
    /// - Parameter path: The request path.
    public func clearQueue(for path: String) {
        _ = core.state.withLock { $0.queues.removeValue(forKey: path) }
    }

    /// The number of one-shot responses and behaviors still queued for `path`.
    ///
    /// - Parameter path: The request path.
    /// - Returns: The queue length.
    public func queuedCount(for path: String) -> Int {
        core.state.withLock { $0.queues[path]?.count ?? 0 }
    }
}
