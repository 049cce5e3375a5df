import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension ServerCore {
    /// What reading a request head produced.
    enum HeadReadResult {
        /// A parsed head.
        case request(HTTPRequestHead)
        /// A malformed or oversized head: answer this status and close.
        case invalid(status: Int)
        /// The peer closed or timed out before sending a complete head.
        case closed
    }

    /// What becomes of a connection after a response.
    enum AfterResponse {
        /// Close it gracefully.
        case close
        /// Reset it (`SO_LINGER` 0).
        case reset
        /// Read the next request on it (``LoopbackServer/Configuration/keepAlive``).
        case keepOpen
    }

    /// How long a kept-open connection waits for its next request before the server closes it: 10 minutes.
    static let keepAliveIdleMilliseconds = 600_000

    /// Serves one connection: one request and its response, then close (`Connection: close`) — or, with
    /// ``LoopbackServer/Configuration/keepAlive``, further requests while every response leaves it open. `number`
    /// is the connection's place in the order of acceptance (``RecordedRequest/connection``).
    func serve(connection descriptor: Int32, number: Int) {
        SocketIO.setOption(descriptor, level: Int32(IPPROTO_TCP), name: TCP_NODELAY, value: 1)
        SocketIO.setReceiveTimeout(descriptor, milliseconds: 30_000)
        var received: [UInt8] = []
        var after = AfterResponse.close
        repeat {
            switch readHead(descriptor, buffer: &received) {
            case .closed:
                after = .close
            case .invalid(let status):
                let builder = ResponseBuilder(
                    head: HTTPRequestHead(method: "GET", target: "/", version: "HTTP/1.1", headers: []),
                    configuration: configuration)
                var plan = builder.errorPage(status)
                plan.dropAfterBytes = nil
                plan.throttleBytesPerSecond = nil
                plan.keepAlive = false
                _ = write(plan, source: nil, on: descriptor)
                after = .close
            case .request(let head):
                after = respond(to: head, connection: number, on: descriptor)
            }
            if after == .keepOpen {
                // A kept-open connection waits long for its next request: a client that pauses between requests
                // (a test kept waiting by a busy machine) must find it open. Shutdown still wakes the wait.
                SocketIO.setReceiveTimeout(descriptor, milliseconds: Self.keepAliveIdleMilliseconds)
            }
        } while after == .keepOpen && !isStopping
        finish(connection: descriptor, reset: after == .reset)
    }

    /// Reads up to and including the empty line ending the head. `buffer` holds bytes already received and keeps
    /// what follows the head (the next request on a kept-open connection).
    func readHead(_ descriptor: Int32, buffer: inout [UInt8]) -> HeadReadResult {
        var chunk = [UInt8](repeating: 0, count: 8192)
        while true {
            if let end = HTTPRequestHead.headEnd(in: buffer) {
                guard end <= HTTPRequestHead.maxHeadSize else { return .invalid(status: 431) }
                defer { buffer.removeFirst(end) }
                do {
                    return .request(try HTTPRequestHead.parse(buffer[0..<end]))
                } catch {
                    return .invalid(status: error.status)
                }
            }
            if buffer.count > HTTPRequestHead.maxHeadSize { return .invalid(status: 431) }
            let received = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if received < 0 && errno == EINTR { continue }
            guard received > 0 else { return .closed }
            buffer += chunk[0..<received]
        }
    }

    /// What the shared state decided for a request, in the same step that recorded it.
    private enum Admission {
        /// Turned away by this concurrency limit.
        case overloaded(ConcurrencyLimit)
        /// Counted in flight under `key`, with the one-shot action it consumed and what is served at its path.
        case admitted(key: String, action: QueuedAction?, resource: Resource?, staticRoot: URL?)
    }

    /// Records the request, picks the response and writes it; returns what becomes of the connection.
    ///
    /// In one locked step the request is recorded, checked against its path's ``ConcurrencyLimit`` and counted in
    /// flight, and takes its one-shot action (one keyed by its range start first, else the FIFO queue's next) and
    /// the resource registered now, which it keeps to the end of its response. It leaves the in-flight count when
    /// its response has been written, before the connection is closed or read again.
    func respond(to head: HTTPRequestHead, connection: Int, on descriptor: Int32) -> AfterResponse {
        var recorded = head.recorded
        recorded.connection = connection
        let decodedPath = PercentDecoding.decodeString(recorded.path)
        let paths = [recorded.path, decodedPath].compactMap(\.self)
        let rangeStart = head.singleRangeStart
        let admission = state.withLock { state -> Admission in
            var found: (key: String, resource: Resource)?
            for path in paths where found == nil {
                if let resource = state.resources[path] { found = (path, resource) }
            }
            let key = found?.key ?? recorded.path
            let limit = found?.resource.concurrencyLimit ?? configuration.concurrencyLimit
            var counters = state.concurrency[key] ?? ConcurrencyCounters()
            defer { keep(counters, for: key, in: &state) }
            if let limit, counters.inFlight >= max(0, limit.maximum) {
                counters.overloads += 1
                recorded.wasOverloaded = true
                record(recorded, in: &state)
                return .overloaded(limit)
            }
            counters.inFlight += 1
            counters.peak = max(counters.peak, counters.inFlight)
            record(recorded, in: &state)
            let action = Self.takeAction(from: &state, paths: paths, rangeStart: rangeStart)
            return .admitted(key: key, action: action, resource: found?.resource, staticRoot: state.staticRoot)
        }
        let builder = ResponseBuilder(head: head, configuration: configuration)
        switch admission {
        case .overloaded(let limit):
            return write(builder.overload(limit), on: descriptor)
        case .admitted(let key, let action, let registered, let staticRoot):
            defer {
                state.withLock { state in
                    var counters = state.concurrency[key] ?? ConcurrencyCounters()
                    counters.inFlight -= 1
                    keep(counters, for: key, in: &state)
                }
            }
            return answer(
                head, path: recorded.path, action: action, registered: registered, staticRoot: staticRoot,
                builder: builder, on: descriptor)
        }
    }

    /// Adds a request to ``LoopbackServer/requests``, unless the server records none
    /// (``LoopbackServer/Configuration/recordsRequests``).
    private func record(_ request: RecordedRequest, in state: inout State) {
        guard configuration.recordsRequests else { return }
        state.requests.append(request)
    }

    /// Stores a path's concurrency counters; a server that records nothing drops them once no request for the path
    /// is in flight, so that requests to ever new paths leave nothing behind.
    private func keep(_ counters: ConcurrencyCounters, for key: String, in state: inout State) {
        let needed = configuration.recordsRequests || counters.inFlight > 0
        state.concurrency[key] = needed ? counters : nil
    }

    /// Takes the one-shot action for a request to `paths` (raw, then percent-decoded): the first one queued for
    /// its range start, else the next one of the FIFO queue, else `nil`.
    private static func takeAction(from state: inout State, paths: [String], rangeStart: Int64?) -> QueuedAction? {
        if let rangeStart {
            for path in paths {
                guard var byStart = state.rangeQueues[path], var queue = byStart[rangeStart], !queue.isEmpty
                else { continue }
                let action = queue.removeFirst()
                byStart[rangeStart] = queue.isEmpty ? nil : queue
                state.rangeQueues[path] = byStart.isEmpty ? nil : byStart
                return action
            }
        }
        for path in paths {
            guard var queue = state.queues[path], !queue.isEmpty else { continue }
            let action = queue.removeFirst()
            state.queues[path] = queue.isEmpty ? nil : queue
            return action
        }
        return nil
    }

    /// Writes the answer for an admitted request: its one-shot action, else its resource or static file.
    private func answer(
        _ head: HTTPRequestHead,
        path: String,
        action: QueuedAction?,
        registered: Resource?,
        staticRoot: URL?,
        builder: ResponseBuilder,
        on descriptor: Int32
    ) -> AfterResponse {
        var queuedBehavior: Behavior?
        switch action {
        case .scripted(let response):
            return write(builder.scripted(response), source: nil, on: descriptor)
        case .behavior(let behavior):
            queuedBehavior = behavior
        case nil:
            break
        }
        guard head.method == "GET" || head.method == "HEAD" else {
            return write(builder.errorPage(405, extraHeaders: [HeaderField("Allow", "GET, HEAD")]), on: descriptor)
        }
        var resource: Resource
        var isStaticFile = false
        if let registered {
            resource = registered
        } else if let staticRoot {
            switch StaticFileResolver.resolve(path: path, root: staticRoot) {
            case .file(let url):
                resource = Resource(body: .file(url), etag: nil, lastModified: nil)
                isStaticFile = true
            case .forbidden:
                return write(builder.errorPage(403), on: descriptor)
            case .notFound:
                return write(builder.errorPage(404), on: descriptor)
            }
        } else {
            return write(builder.errorPage(404), on: descriptor)
        }
        let behavior = queuedBehavior ?? resource.behavior
        if let status = behavior.status {
            return write(builder.status(status, resource: resource, behavior: behavior), on: descriptor)
        }
        if let redirect = behavior.redirect {
            return write(builder.redirect(redirect, resource: resource, behavior: behavior), on: descriptor)
        }
        guard let source = ContentSource(body: resource.body) else {
            return write(builder.errorPage(404), on: descriptor)
        }
        if isStaticFile, let info = source.fileInfo {
            resource.etag = info.etag
            resource.lastModified = info.lastModified
        }
        return write(
            builder.content(resource: resource, behavior: behavior, source: source), source: source, on: descriptor)
    }

    /// Writes a plan; returns what becomes of the connection.
    private func write(_ plan: ResponsePlan, source: ContentSource? = nil, on descriptor: Int32) -> AfterResponse {
        let needsScratch =
            plan.includesBody
            && plan.parts.contains { part in
                if case .literal = part { return false }
                return true
            }
        let scratch = UnsafeMutableRawBufferPointer.allocate(
            byteCount: needsScratch ? ResponseWriter.chunkSize : 1, alignment: 16)
        defer { scratch.deallocate() }
        let writer = ResponseWriter(descriptor: descriptor, plan: plan, source: source, scratch: scratch) {
            [self] in isStopping
        }
        switch writer.write() {
        case .dropped where plan.resetOnDrop: return .reset
        case .completed where plan.keepAlive: return .keepOpen
        default: return .close
        }
    }
}
