import Foundation

/// What wakes the transfer loop of one request.
enum ConnectionSignal: Sendable {
    /// A connection's transfer returned, with the error it threw.
    case ended(connection: Int, error: ResumableError?)
    /// The schedule left actions in ``DownloadEngine/State/pendingActions``.
    case wake
    /// Time for ``SegmentSchedule/tick(now:)``.
    case tick
    /// Preallocating the file ended, with the error it threw.
    case preallocated(ResumableError?)
}

extension DownloadEngine {
    /// How a request's transfer ended: a single response (the machine decides from the error), or a
    /// multi-connection phase that grew out of it (already decided).
    enum TransferEnd: Sendable {
        case single(ResumableError?)
        /// `progressed`: the phase brought the floor's worth of bytes (``SegmentSchedule/madeProgress``); `answers`: how
        /// many answers it joined (``SegmentSchedule/joinedAnswers``).
        case segments(ResumeStateMachine.Outcome, progressed: Bool, answers: Int)
    }

    /// How often the schedule looks at stalls and the automatic connection count: often enough that a ramp
    /// window (50 ms) ends within a few milliseconds of its last byte.
    static let tickInterval: Duration = .milliseconds(10)

    func transportRequest(_ request: ResumeStateMachine.Request) -> TransportRequest {
        TransportRequest(
            url: request.url, headers: request.headers, idleTimeout: configuration.idleTimeout,
            connectTimeout: configuration.connectTimeout, tls: configuration.tls, proxy: configuration.proxy)
    }

    /// The schedule's settings for a multi-connection phase.
    ///
    /// While a digest is computed (the engine holds a ``PrefixHasher``), connections are given the file in order, a
    /// piece (``DownloadTask/Configuration/hashingPieceLength``, 8 MiB) at a time: the hasher can only follow the
    /// contiguous prefix, which with even segments grows with the first segment alone, so that most of the file would
    /// be hashed after its last byte arrived. With pieces the prefix trails the newest piece by about one piece per
    /// connection, and that is about all that is left to hash at the end (with four connections, 32 MiB: some 30 ms
    /// with libcrypto). Why 8 MiB: each piece is a request of its own (on a kept-alive connection: a round trip and a
    /// head), well under a millisecond on loopback against the ≈ 5–30 ms one piece takes to arrive there, and on a
    /// real network a round trip against the seconds a piece takes on a capped connection; the tail of 16
    /// connections × 8 MiB is still hashed in about a tenth of a second. Measured on 1 GiB from nginx
    /// (`docs/performance.md`, section 3): 4, 8, 16 and 32 MiB within noise of each other, so the smaller tail wins
    /// over fewer requests. Without a hasher the file is shared evenly, as before: fewer requests, and nothing to
    /// gain from the order.
    var segmentSettings: SegmentSchedule.Settings {
        let (hashing, ceiling) = state.withLock { ($0.hasher != nil, $0.connectionCeiling) }
        var connections = configuration.connections
        if let ceiling {
            // The server pushed an earlier phase down to `ceiling`: no more than that, and no ramp beyond it.
            switch connections.kind {
            case .fixed(let count): connections = .fixed(min(count, ceiling))
            case .automatic: connections = .fixed(min(ceiling, DownloadTask.Connections.maximum))
            }
        }
        return SegmentSchedule.Settings(
            connections: connections,
            minimumSegmentLength: configuration.minimumSegmentLength,
            stallTimeout: configuration.segmentStallTimeout ?? min(configuration.idleTimeout, .seconds(10)),
            pieceLength: hashing ? max(configuration.hashingPieceLength, configuration.minimumSegmentLength) : nil)
    }

    /// Sends `request` as connection 0 and waits for it. When its answer starts a multi-connection phase
    /// (``DownloadEngine/receive(_:connection:)``), performs what the schedule decides, opening and stopping
    /// connections, until the phase ends; every connection has returned before this does.
    func transfer(_ request: TransportRequest, session: any TransportSession) async -> TransferEnd {
        let (signals, continuation) = AsyncStream.makeStream(of: ConnectionSignal.self)
        state.withLock { state in
            state.segments = nil
            state.pendingActions = []
            state.signals = continuation
        }
        var connections: [Int: Task<Void, Never>] = [:]
        var ticker: Task<Void, Never>?
        // Runs beside the loop, which goes on judging answers and ticking meanwhile; awaited before the file is let go.
        var preallocating: Task<Void, Never>?
        func launch(_ id: Int, _ request: TransportRequest) {
            connections[id] = Task {
                var failure: ResumableError?
                do throws(ResumableError) {
                    try await session.execute(request, consumer: Consumer(engine: self, connection: id))
                } catch {
                    failure = error
                }
                continuation.yield(.ended(connection: id, error: failure))
            }
        }
        // Once a second connection is opened, after its request went out, and beside the loop: allocating a large file
        // takes a while (writers wait meanwhile), and fallocate keeps whatever segments wrote
        // meanwhile. It fails early on a full disk. Not while one connection writes in order (the automatic count's
        // first window): it would measure the allocation, not the connection.
        func preallocateIfPending() {
            let (preallocation, file) = state.withLock { state in
                defer { state.preallocation = nil }
                return (state.preallocation, state.file)
            }
            guard let preallocation else { return }
            preallocating = Task {
                let failure = await Self.offThePool { () -> ResumableError? in
                    do throws(ResumableError) {
                        try file.preallocate(length: preallocation)
                        return nil
                    } catch {
                        return error
                    }
                }
                continuation.yield(.preallocated(failure))
            }
        }
        func perform(_ actions: [SegmentSchedule.Action]) {
            for action in actions {
                switch action {
                case .request(let id, let range):
                    let request = state.withLock { $0.machine.segmentRequest(range) }
                    events.send(.segmentStarted(connection: id, range: range))
                    launch(id, transportRequest(request))
                case .stop(let id):
                    connections[id]?.cancel()
                }
            }
            if actions.contains(where: { if case .request = $0 { true } else { false } }) { preallocateIfPending() }
        }
        // Stops every connection and hands the phase's bytes and its end to the machine, which decides what follows.
        func endPhase(_ end: ResumeStateMachine.SegmentsEnd) async -> TransferEnd {
            await stopAll(connections)
            connections = [:]
            return state.withLock { state in
                defer { state.segments = nil }
                if let lowered = state.segments?.loweredTo {
                    state.connectionCeiling = min(state.connectionCeiling ?? lowered, lowered)
                }
                let outcome = state.machine.segmentsEnded(end, present: state.segments?.present ?? ByteRangeSet())
                return .segments(
                    outcome, progressed: state.segments?.madeProgress ?? false,
                    answers: state.segments?.joinedAnswers ?? 1)
            }
        }
        launch(0, request)
        var result: TransferEnd?
        // Ends early when the task is cancelled (a pause, the deadline): the connections are stopped below.
        loop: for await signal in signals {
            switch signal {
            case .ended(let id, let error):
                connections[id] = nil
                let step = state.withLock { state -> SegmentSchedule.Step? in
                    guard state.segments != nil else { return nil }
                    return state.segments?.ended(connection: id, error: error)
                }
                guard let step else {
                    // No phase began: the single response is over.
                    result = .single(error)
                    break loop
                }
                if let failure = step.failure {
                    events.send(.segmentFailed(connection: id, remaining: failure.remaining, error: failure.error))
                }
                perform(step.actions)
                if let end = step.end {
                    result = await endPhase(end)
                    break loop
                }
            case .wake:
                let actions = state.withLock { state in
                    defer { state.pendingActions = [] }
                    return state.pendingActions
                }
                perform(actions)
                if ticker == nil {
                    ticker = Task {
                        while !Task.isCancelled {
                            try? await Task.sleep(for: Self.tickInterval)
                            continuation.yield(.tick)
                        }
                    }
                }
            case .tick:
                let step = state.withLock { $0.segments?.tick() } ?? SegmentSchedule.Step()
                perform(step.actions)
            case .preallocated(let failure):
                guard let failure else { continue }
                result = await endPhase(.fail(failure))
                break loop
            }
        }
        ticker?.cancel()
        await stopAll(connections)
        // The file is not let go, nor switched, while fallocate works on it.
        await preallocating?.value
        continuation.finish()
        state.withLock { state in
            state.signals = nil
            // A phase stopped without an outcome (a pause, the deadline): what it wrote is what the token describes.
            if let present = state.segments?.present { state.machine.segmentsProgressed(present) }
        }
        // Cancelled: the caller sees the stop; what is returned does not matter.
        return result ?? .single(ResumableError(.cancelled, "the download was cancelled"))
    }

    private func stopAll(_ connections: [Int: Task<Void, Never>]) async {
        for task in connections.values { task.cancel() }
        for task in connections.values { await task.value }
    }
}
