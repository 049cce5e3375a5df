import Foundation

/// Who fetches which bytes when one download uses several connections: a pure value type with no I/O.
///
/// ``ResumeStateMachine`` judges every response (``ResumeStateMachine/judgeSegment(_:requested:)``); this type
/// decides what each connection does next, and its mutating methods return the ``Action``s its owner
/// (``DownloadEngine``) performs:
/// - **Splitting.** The response that started the download is the first segment. The rest is split evenly
///   among the connections wanted, never into segments under the minimum length. Whenever several connections
///   start at once (a step of the automatic count too), every working connection keeps an even share of what is
///   left and gives up the rest to the newcomers, so that all end together.
/// - **Pieces in file order.** With ``Settings/pieceLength`` (set while a digest is computed), no connection is
///   given more than a piece at a time: the first split caps every share at it, and a connection that finished
///   takes the first piece nobody has or fetches. The file then fills from the front, and the contiguous prefix
///   the hasher follows trails the newest piece by at most about one piece per connection.
/// - **Work stealing.** A connection that finished takes the first range nobody fetches (at most a piece), else
///   half of the largest remaining segment, whose connection stops early.
/// - **A held tail.** A connection whose answer goes on past its end (the first answer, a segment another connection
///   took the rest of) may get its last bytes only with the server's next burst: nginx under `limit_rate` sends
///   `sendfile_max_chunk` at a time and then waits, and the bytes of a burst that go past a segment's end are not
///   what the segment waits for. When it is the last connection open, has at most a minimum segment left, and
///   fell silent for longer than that rest should take at its rate so far and than a request takes, its rest is asked
///   on a fresh connection, whose answer ends where the rest ends (``retakeTail(now:)``). A retaken rest is never
///   retaken again: its own silence is a stall.
/// - **Stalls.** A segment that received nothing for the stall timeout while the others keep receiving (and wrote
///   a minimum segment's worth since its last byte, or it stayed silent for twice the stall timeout), or when it
///   is the last one working, is stopped and asked again on a fresh connection; stalls and failed segments in a row
///   without progress between them (``AttemptLimits/progressFloor(missing:)``: 64 KiB, not a byte) count as
///   failures, and end the phase to back off. A connection that wrote all of its range is
///   never stalled, however long its transfer takes to end.
/// - **Back-off.** An overloaded answer (`503`, `429`), or a connection that fails before its response, lowers
///   the number of connections and does not count as a failure in a row (many `503`s beyond a limit are one
///   answer); when none is left working, the phase ends with ``ResumeStateMachine/SegmentsEnd/retry(_:)`` and the
///   engine backs off. The count it came down to (``loweredTo``) caps the task's later phases. A segment turned
///   away with a status that says nothing about the file (`403`, `404`, a redirect:
///   ``ResumeStateMachine/SegmentVerdict/refused(_:)``) lowers the count the same way. Once the count came
///   down, a working connection whose answer carries more than its share (the first answer) reads on into the bytes
///   right after it that nobody fetches.
/// - **Automatic count.** ``DownloadTask/Connections/automatic`` starts with one connection, goes to
///   ``firstRampStep``, and doubles the count while the total rate grows by at least ``rampGain``, going back when a
///   step did not pay that; a settled count tries again after ``rampRetryInterval``, twice as long after each try
///   that did not pay.
///
/// Bytes count as present only once written (``wrote(connection:count:now:)``), so a token made from
/// ``present`` describes bytes that are in the file.
struct SegmentSchedule: Sendable {
    /// What the owner must do.
    enum Action: Hashable, Sendable {
        /// Open a connection with this identifier and ask for `range` (``ResumeStateMachine/segmentRequest(_:)``).
        case request(connection: Int, range: Range<Int64>)
        /// Stop this connection's transfer; ``ended(connection:error:now:)`` follows.
        case stop(connection: Int)
    }

    /// What a step decided: actions, and, when the phase is over, how it ended.
    struct Step: Sendable {
        var actions: [Action] = []
        var end: ResumeStateMachine.SegmentsEnd?
        /// A connection that failed, the part of its segment it left, and why.
        var failure: (remaining: Range<Int64>, error: ResumableError)?
    }

    struct Settings: Sendable {
        var connections: DownloadTask.Connections
        var minimumSegmentLength: Int64
        var stallTimeout: Duration
        /// How long a connection count is measured, at least, before the automatic count decides (and each
        /// connection must have brought ``SegmentSchedule/rampBytesPerConnection``).
        var rampWindow: Duration = .milliseconds(50)
        /// When set, the most a connection is given at a time, in file order (see ``SegmentSchedule``); `nil`: each
        /// connection is given an even share of the file. Never below ``minimumSegmentLength``.
        var pieceLength: Int64?
    }

    private struct Connection: Sendable {
        /// The range asked for; a 206 must start at its first byte.
        var requested: Range<Int64>
        /// The next byte this connection writes.
        var next: Int64
        /// Where this connection stops: the end asked for, moved earlier when another connection took the rest.
        var end: Int64
        /// Where the bytes its answer carries end: the first answer's whole range, a `206`'s `Content-Range` end once
        /// joined (the range asked for until then). ``end`` never moves past it.
        var covers: Int64
        var accepted: Bool
        /// Where the response's body ends, when its Content-Length says so: its last byte ends the transfer without
        /// stopping it.
        var answerEnd: Int64?
        /// Opened for the next piece when a connection finished its own: for the automatic count, a connection that
        /// goes on working, not one that still has to show its rate.
        var continuesPiece = false
        /// Opened for the rest of a held tail (``retakeTail(now:)``): never retaken itself.
        var retakesTail = false
        /// Whether any body byte arrived.
        var received = false
        var lastActivity: ContinuousClock.Instant
        /// ``bytesWritten`` (all connections) at ``lastActivity``: what the others wrote since.
        var writtenAtLastActivity: Int64 = 0
        /// Set when the head was judged unusable; reported when the transfer ends.
        var verdict: ResumeStateMachine.SegmentVerdict?
        /// Set when this schedule stopped the connection (a stall, fewer connections).
        var stopped = false
        /// Set when it was stopped because nothing arrived for the stall timeout.
        var stalled = false
        /// When this connection's request was opened (`nil` for the probe, sent before the phase began).
        var requestedAt: ContinuousClock.Instant?
        /// When its first body byte was written, and where: what it brought since gives its rate.
        var firstByteAt: ContinuousClock.Instant?
        var firstBytePosition: Int64 = 0
    }

    private enum Ramp: Sendable {
        /// The first connection's first half ``rampBytesPerConnection`` is not measured: a new connection into a
        /// new file (slow start, the file's first pages, threads starting) made one connection look slower than it
        /// is, and four look like a proportional gain, on a loopback link where one connection is as fast as any.
        case warmingUp
        case measuring(
            count: Int, since: ContinuousClock.Instant, bytesAtStart: Int64, previous: (count: Int, rate: Double)?)
        /// The count stays; the automatic count tries to grow again after `retryInterval`.
        case settled(since: ContinuousClock.Instant)
        /// The server pushed back (overload, refused connections): the count never grows again in this phase.
        case backedOff
    }

    /// The growth of the total rate that makes the automatic count double again.
    static let rampGain = 1.2
    /// The count the automatic count tries after one connection: one window fewer than doubling to two and then
    /// four, on servers that cap each connection (the common reason to open several); on a server where the link
    /// is the limit, four connections cost no more than two, and a step that made things slower is taken back.
    static let firstRampStep = 4
    /// The share of a proportional growth (four times the connections, four times the rate) that makes the next
    /// step go straight to the most connections instead of doubling.
    static let proportionalGain = 0.8
    /// How many bytes each connection must have received in a measuring window (at most half a minimum segment).
    static let rampBytesPerConnection: Int64 = 512 << 10
    /// How long a settled automatic count stays before it tries to grow again; it doubles after each step that did
    /// not pay, up to ``longestRampRetryInterval``, so a server where the link is the limit is not probed with new
    /// connections every two seconds.
    static let rampRetryInterval: Duration = .seconds(2)
    static let longestRampRetryInterval: Duration = .seconds(32)
    /// Segment failures in a row, without a byte between them, after which the phase ends to back off.
    static let maximumFailuresInARow = 8
    /// The least a connection takes at the end of the download, when no segment is left to split at the minimum
    /// length (``takeEndgameWork(now:)``): a request is not worth fewer bytes (as for ``AttemptLimits``).
    static let endgamePieceLength: Int64 = 64 << 10
    /// How many times a new request's latency the rest of a segment must take before a connection that finished
    /// splits it at the end: the newcomer's half then arrives well before the segment would have ended.
    static let endgameLatencyFactor = 4.0
    /// The least silence of the last connection working before its rest is asked again (``retakeTail(now:)``).
    static let tailSilenceFloor: Duration = .milliseconds(2)

    let total: Int64
    let settings: Settings
    /// Bytes written to the file, the ones before this phase included.
    private(set) var present: ByteRangeSet
    /// Body bytes written in this phase.
    private(set) var bytesWritten: Int64 = 0
    /// How many connections the schedule wants working.
    private(set) var target: Int
    private var connections: [Int: Connection] = [:]
    private var nextIdentifier: Int
    private var ramp: Ramp
    private var retryInterval = SegmentSchedule.rampRetryInterval
    private var failuresInARow = 0
    /// ``bytesWritten`` when ``failuresInARow`` last went back to 0: only as many bytes as
    /// ``AttemptLimits/progressFloor(missing:)`` asks since then start the count again, so that a server sending a
    /// byte per connection and closing it ends the phase instead of feeding it a request per byte.
    private var writtenAtLastProgress: Int64 = 0
    /// Whether this phase ever brought the floor's worth of bytes (``writtenAtLastProgress`` moved, which it does only
    /// past a byte written): a phase that ends in a retry without it is judged per answer, whatever its many small
    /// pieces add up to.
    var madeProgress: Bool { writtenAtLastProgress > 0 }
    /// How many answers this phase joined (206s accepted, the first answer included): what a phase that never made
    /// progress brought is judged per answer, as one connection's attempts are.
    private(set) var joinedAnswers = 1
    /// The count the server pushed this phase down to (overloaded or refused answers; half the count when failures in a
    /// row ended the phase), `nil` while it did not: the owner starts its next phase there, so that a server allowing
    /// one connection per client does not get the configured count's worth of turned-away requests in every phase.
    private(set) var loweredTo: Int?
    private var lastError: ResumableError?
    /// The longest time from a request to its first body byte in this phase: what a new request costs.
    private var longestLatency: Duration?
    /// The shortest time from a request to its first body byte in this phase: what a new request costs at least.
    private var shortestLatency: Duration?
    /// The most connections that received body bytes at once in this phase: a server that turns connections away
    /// beside that many has no limit below it (a bad moment, a backend restarting), and later phases are not held
    /// under it (``loweredTo``).
    private var mostReceivingAtOnce = 0

    /// A phase whose first segment is the accepted response `probe` of `basis`, read by connection `probeConnection`.
    init(
        basis: ResumeStateMachine.SegmentBasis, settings: Settings, probeConnection: Int,
        now: ContinuousClock.Instant = .now
    ) {
        self.total = basis.total
        self.settings = settings
        self.present = basis.present
        self.nextIdentifier = probeConnection + 1
        // The probe stops where the file already has bytes, or where its answer ends.
        let firstPresent = basis.present.ranges.first { $0.lowerBound >= basis.probe.lowerBound }?.lowerBound
        let probeEnd = min(basis.probe.upperBound, firstPresent ?? basis.probe.upperBound)
        // The probe's answer is not trusted to end by itself (``answerIsOver(connection:)``): it is stopped at its end.
        connections[probeConnection] = Connection(
            requested: basis.probe, next: basis.probe.lowerBound, end: probeEnd, covers: basis.probe.upperBound,
            accepted: true, lastActivity: now)
        switch settings.connections.kind {
        case .fixed(let count):
            target = max(1, min(count, DownloadTask.Connections.maximum))
            ramp = .backedOff
        case .automatic:
            target = 1
            ramp = .warmingUp
        }
    }

    /// Whether a multi-connection phase is worth starting for `basis`: more than one connection allowed, and
    /// enough bytes missing for at least two segments; for the automatic count, sixteen (16 MiB by default: below
    /// that, opening connections rarely pays for itself).
    static func isWorthwhile(_ basis: ResumeStateMachine.SegmentBasis, settings: Settings) -> Bool {
        let missing = basis.total - basis.present.count
        switch settings.connections.kind {
        case .fixed(let count):
            return count > 1 && missing >= 2 * settings.minimumSegmentLength
        case .automatic:
            return missing >= 16 * settings.minimumSegmentLength
        }
    }

    /// How many connections are open.
    var activeCount: Int { connections.count }

    /// Whether every byte of the file is in it.
    var isComplete: Bool { present.contains(0..<total) }

    /// The first step: splits the work among the connections wanted.
    mutating func start(now: ContinuousClock.Instant = .now) -> Step {
        Step(actions: fill(now: now))
    }

    // MARK: - Responses

    /// Records the verdict on a connection's response head; returns whether to write its body. `framedByLength`: the
    /// answer's Content-Length (which the verdict checked against its Content-Range) ends it, not chunked framing.
    mutating func head(
        connection id: Int, verdict: ResumeStateMachine.SegmentVerdict, framedByLength: Bool = false,
        now: ContinuousClock.Instant = .now
    )
        -> Bool
    {
        guard var connection = connections[id], !connection.stopped else { return false }
        connection.lastActivity = now
        connection.writtenAtLastActivity = bytesWritten
        if case .join(let end) = verdict {
            connection.accepted = true
            joinedAnswers += 1
            // Only an answer whose Content-Length ends it there is left to end by itself: a chunked one may go on, or
            // hold, past the end its Content-Range names.
            connection.answerEnd = framedByLength ? end : nil
            connection.end = min(connection.end, end)
            connection.covers = min(connection.covers, end)
            connections[id] = connection
            return true
        }
        connection.verdict = verdict
        connections[id] = connection
        return false
    }

    /// Where `count` body bytes of connection `id` go, and how many of them belong to its segment (the rest is
    /// another connection's: not written). `nil`: none, the connection must stop.
    func placement(connection id: Int, count: Int) -> (position: Int64, count: Int)? {
        guard let connection = connections[id], connection.accepted, !connection.stopped else { return nil }
        let room = connection.end - connection.next
        guard room > 0 else { return nil }
        return (connection.next, Int(min(Int64(count), room)))
    }

    /// `count` bytes were written at the connection's next position. Returns whether its segment is complete (the
    /// transfer stops, even if the response goes on).
    mutating func wrote(connection id: Int, count: Int, now: ContinuousClock.Instant = .now) -> Bool {
        guard var connection = connections[id] else { return true }
        let start = connection.next
        // Another connection may have taken over the rest meanwhile: only bytes up to the end count here.
        let count = Int(min(Int64(count), max(connection.end - connection.next, 0)))
        let firstByte = !connection.received
        if firstByte {
            connection.firstByteAt = now
            connection.firstBytePosition = start
            if let requestedAt = connection.requestedAt {
                let latency = now - requestedAt
                longestLatency = max(longestLatency ?? .zero, latency)
                shortestLatency = min(shortestLatency ?? latency, latency)
            }
        }
        connection.next += Int64(count)
        connection.lastActivity = now
        connection.received = true
        present.insert(start..<connection.next)
        bytesWritten += Int64(count)
        connection.writtenAtLastActivity = bytesWritten
        connections[id] = connection
        if firstByte {
            mostReceivingAtOnce = max(mostReceivingAtOnce, connections.values.count { $0.received && !$0.stopped })
        }
        if case .warmingUp = ramp, bytesWritten >= rampBytesPerConnection / 2 {
            // Measured from the write that ends the warm-up, not from the next tick: a server sending in bursts
            // (nginx under `limit_rate`) sends the first one at once, and the window then holds whole bursts.
            ramp = .measuring(count: 1, since: now, bytesAtStart: bytesWritten, previous: nil)
        }
        if bytesWritten - writtenAtLastProgress
            >= AttemptLimits.progressFloor(missing: total - present.count + Int64(count))
        {
            failuresInARow = 0
            writtenAtLastProgress = bytesWritten
        }
        return connection.next >= connection.end
    }

    /// Whether connection `id`'s response has no byte left after those written: its transfer ends by itself, so
    /// there is no need to stop it (which would cost its kept-alive connection). Never once the file is complete:
    /// the phase is over, and no connection is worth keeping, whatever its answer.
    func answerIsOver(connection id: Int) -> Bool {
        guard !isComplete, let connection = connections[id], let answerEnd = connection.answerEnd else { return false }
        return connection.next >= answerEnd
    }

    /// The connection is alive but holds back on purpose (a rate limit makes it wait): not a stall.
    mutating func touch(connection id: Int, now: ContinuousClock.Instant = .now) {
        guard connections[id] != nil else { return }
        connections[id]?.lastActivity = now
        connections[id]?.writtenAtLastActivity = bytesWritten
    }

    /// A connection's transfer ended, with `error` when it did not end cleanly.
    mutating func ended(connection id: Int, error: ResumableError?, now: ContinuousClock.Instant = .now) -> Step {
        guard let connection = connections.removeValue(forKey: id) else { return Step() }
        let finished = connection.next >= connection.end
        var failure: (remaining: Range<Int64>, error: ResumableError)?
        if !finished && !connection.stopped {
            failure = (
                connection.next..<connection.end,
                Self.error(of: connection.verdict) ?? error
                    ?? ResumableError(.incompleteBody, "a segment's body ended early")
            )
            switch connection.verdict {
            case .fileChanged(let reason):
                return Step(actions: stopAll(), end: .restart(reason), failure: failure)
            case .fail(let error):
                return Step(actions: stopAll(), end: .fail(error), failure: failure)
            case .refused(let error):
                // The connections still reading the file go on, one fewer. With none left, back off and continue from
                // the disk as after a 503: the next request is judged as any download's, so a 403 or a 404 that is
                // the file's own fails it there, and a limit that only counted this connection serves it.
                if let end = failed(error, lowering: true) {
                    return Step(actions: stopAll(), end: end, failure: failure)
                }
            case .overloaded(let error):
                if let end = failed(error, lowering: true) {
                    return Step(actions: stopAll(), end: end, failure: failure)
                }
            case .unusable(let error):
                // Not the network's fault: when no connection is left working, go on with one, as a plain GET would.
                if let end = failed(error, lowering: true) {
                    let single: ResumeStateMachine.SegmentsEnd = connections.isEmpty ? .single : end
                    return Step(actions: stopAll(), end: single, failure: failure)
                }
            case .join, nil:
                let cause = error ?? ResumableError(.incompleteBody, "a segment's body ended early")
                if cause.code == .protocolViolation, !connection.accepted {
                    // An answer too malformed to judge (a status line of `2000`) says nothing about the file nor
                    // about the connections reading it: this connection only, as a refused one (rule 17h). With none
                    // left, the request that follows the phase meets the same answer and is judged there.
                    if let end = failed(cause, lowering: true) {
                        return Step(actions: stopAll(), end: end, failure: failure)
                    }
                    break
                }
                guard cause.isTransient else { return Step(actions: stopAll(), end: .fail(cause), failure: failure) }
                // A connection refused, or cut before its first body byte, while others work: likely a limit on
                // connections (some servers send the head, then close). One whose 206 was accepted and then went
                // silent until the idle timeout is a stall the transport found, not a refusal.
                let refused = !connection.accepted || (!connection.received && cause.code != .timedOut)
                if let end = failed(cause, lowering: refused) {
                    return Step(actions: stopAll(), end: end, failure: failure)
                }
            }
        } else if !connection.stopped, connection.covers < connection.requested.upperBound,
            connection.next - connection.requested.lowerBound
                < AttemptLimits.bodyFloor(
                    missing: total - present.count + connection.next - connection.requested.lowerBound,
                    asked: connection.requested.upperBound - connection.requested.lowerBound)
        {
            // A whole answer that covered less than asked, and brought next to nothing (a one-byte 206): the rest goes
            // to a new request below, and that counts as a failure in a row, as a short body does on one connection
            // (``AttemptLimits``); otherwise such a server gets a request per byte.
            let error = ResumableError(
                .protocolViolation,
                "a segment's 206 covered \(connection.covers - connection.requested.lowerBound) "
                    + "of the \(connection.requested.upperBound - connection.requested.lowerBound) bytes asked")
            failure = (connection.next..<connection.requested.upperBound, error)
            if countFailure() {
                return Step(actions: stopAll(), end: .retry(error), failure: failure)
            }
        } else if connection.stalled {
            // Asked again on a fresh connection below; a stall counts as a failure until bytes arrive again, so a
            // server that holds every connection ends the phase (and the download backs off) instead of looping.
            let error = ResumableError(
                .timedOut, "a segment received nothing for \(settings.stallTimeout); it is asked again")
            failure = (connection.next..<connection.end, error)
            if countFailure() {
                return Step(actions: stopAll(), end: .retry(error), failure: failure)
            }
        }
        if isComplete {
            return Step(actions: stopAll(), end: .complete, failure: failure)
        }
        // With pieces, the connection that finished its piece goes on with the next one: a request on the same
        // kept-alive connection, not a newcomer for the automatic count.
        let continuing = finished && !connection.stopped && settings.pieceLength != nil
        let actions = fill(now: now, continuing: continuing)
        // The last connection left may already be behind its pace: its rest need not wait for the next tick.
        return Step(actions: actions.isEmpty ? retakeTail(now: now) : actions, failure: failure)
    }

    private static func error(of verdict: ResumeStateMachine.SegmentVerdict?) -> ResumableError? {
        switch verdict {
        case .overloaded(let error), .unusable(let error), .refused(let error), .fail(let error): return error
        case .fileChanged(let reason): return ResumableError(.protocolViolation, reason.description)
        case .join, nil: return nil
        }
    }

    /// The range connection `id` asked for.
    func requestedRange(connection id: Int) -> Range<Int64>? {
        connections[id]?.requested
    }

    /// Counts a failed segment; lowers the count when asked. Returns an end when no connection is left working or
    /// failures keep coming without progress.
    ///
    /// A failure that lowers the count (an overloaded server, a refused connection) does not count towards
    /// ``maximumFailuresInARow``: twelve `503`s for the twelve connections beyond a limit of four are one answer,
    /// "four", not a reason to give up on the four that work. Lowering cannot loop: no connection is opened
    /// beyond those still working, so the phase ends once none is left.
    private mutating func failed(_ error: ResumableError, lowering: Bool) -> ResumeStateMachine.SegmentsEnd? {
        lastError = error
        if connections.isEmpty { return .retry(error) }
        if lowering {
            // Only the connections still working: a stopped one whose transfer has not returned yet is not one of
            // them, or each 503 meanwhile would open a replacement.
            target = max(1, min(target, connections.values.count { !$0.stopped }))
            // Later phases: no fewer than received at once in this one, which no limit of the server's is below.
            let remembered = max(target, mostReceivingAtOnce)
            loweredTo = min(loweredTo ?? remembered, remembered)
            ramp = .backedOff
            readOnIntoUnclaimedBytes()
            return nil
        }
        return countFailure() ? .retry(error) : nil
    }

    /// Counts a failure in a row; returns whether there are too many, which ends the phase. Its connections then count
    /// as one failed attempt of the engine's. A phase that never brought the floor (``madeProgress``) also makes the
    /// task's later phases open at most half as many (``loweredTo``): otherwise a server cutting every segment after a
    /// byte gets the count's worth of requests again in every phase that follows a phase whose first answer brought
    /// 64 KiB. One that did bring it (a working link, then one bad moment that cut every connection) keeps the count.
    private mutating func countFailure() -> Bool {
        failuresInARow += 1
        guard failuresInARow > Self.maximumFailuresInARow else { return false }
        if !madeProgress {
            let halved = max(1, target / 2)
            loweredTo = min(loweredTo ?? halved, halved)
        }
        return true
    }

    // MARK: - Time

    /// Called regularly: stops stalled segments and steers the automatic count.
    mutating func tick(now: ContinuousClock.Instant = .now) -> Step {
        var actions: [Action] = []
        // A stall counts while other connections make progress, or when the stalled one is the last one working (a
        // stuck last segment). Progress means recent bytes, and either a minimum segment's worth of them since the
        // stalled one's last byte or twice the stall timeout of silence: a connection that merely answered later than
        // its peers (a busy machine, a slow handshake) is not a stuck one, and one stuck beside slow peers is still
        // found long before the transport's idle timeout. When several stall at once, the network is likely down:
        // each transfer's idle timeout decides, and the download backs off.
        // A connection that wrote all of its range is not stuck, however long its transfer takes to end (its answer
        // ends there by itself, or it is being stopped): nothing of the file waits for it.
        let working = connections.values.filter { !$0.stopped && $0.next < $0.end }
        let progressing = working.contains { now - $0.lastActivity < settings.stallTimeout }
        for (id, connection) in connections where !connection.stopped && connection.next < connection.end {
            let silence = now - connection.lastActivity
            guard silence >= settings.stallTimeout else { continue }
            let overtaken =
                progressing
                && (bytesWritten - connection.writtenAtLastActivity >= settings.minimumSegmentLength
                    || silence >= settings.stallTimeout * 2)
            if overtaken || working.count == 1 {
                connections[id]?.stopped = true
                connections[id]?.stalled = true
                actions.append(.stop(connection: id))
            }
        }
        actions += steerCount(now: now)
        // A connection that finished found no segment worth splitting then; the rest of a slow one may be worth it by
        // now (``takeEndgameWork(now:)``). Not while a stopped connection has yet to end: its range goes to its
        // successor first.
        if connections.count < target, claimed.gaps(in: 0..<total).isEmpty {
            if let range = takeEndgameWork(now: now) {
                actions.append(open(range, now: now))
            } else {
                actions += retakeTail(now: now)
            }
        }
        return Step(actions: actions)
    }

    private mutating func steerCount(now: ContinuousClock.Instant) -> [Action] {
        // A window long enough, and with enough bytes per connection that a server sending in bursts (nginx sends
        // `sendfile_max_chunk` at a time under `limit_rate`) does not decide it; at most a second.
        let perConnection = rampBytesPerConnection
        if case .settled(let settledAt) = ramp, now - settledAt >= retryInterval,
            target < DownloadTask.Connections.maximum
        {
            // A decision made on one short window may have been noise: measure the settled count again, then try more.
            // Should this try not pay either, the next one waits twice as long.
            retryInterval = min(retryInterval * 2, Self.longestRampRetryInterval)
            ramp = .measuring(count: target, since: now, bytesAtStart: bytesWritten, previous: nil)
        }
        guard case .measuring(let count, let since, let bytesAtStart, let previous) = ramp else { return [] }
        let accepted = connections.values.filter { ($0.accepted || $0.continuesPiece) && !$0.stopped }.count
        guard accepted >= count else {
            // Measure only once every connection of this count receives (one between two pieces still does).
            ramp = .measuring(count: count, since: now, bytesAtStart: bytesWritten, previous: previous)
            return []
        }
        let elapsed = now - since
        let enoughBytes = bytesWritten - bytesAtStart >= Int64(count) * perConnection
        guard elapsed >= settings.rampWindow, enoughBytes || elapsed >= .seconds(1) else { return [] }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = Double(bytesWritten - bytesAtStart) / seconds
        guard rate > 0 else {
            ramp = .measuring(count: count, since: now, bytesAtStart: bytesWritten, previous: previous)
            return []
        }
        var factor = count == 1 ? Self.firstRampStep : 2
        if let previous {
            if rate < previous.rate * Self.rampGain {
                // The last step did not pay: back to the count before it (connections that bring nothing are a cost
                // to the server, and each segment more delays a digest, which follows the file's first segment).
                ramp = .settled(since: now)
                target = max(1, previous.count)
                return retireExtraConnections()
            }
            // The rate grew almost in proportion: each connection is capped, not the link. Go to the most at once;
            // the next window shows whether it helped.
            if rate >= previous.rate * Double(count) / Double(previous.count) * Self.proportionalGain {
                factor = DownloadTask.Connections.maximum
            }
        }
        let missing = total - present.count
        let next = min(DownloadTask.Connections.maximum, count * factor)
        guard next > count, missing >= Int64(next) * settings.minimumSegmentLength else {
            ramp = .settled(since: now)
            return []
        }
        target = next
        ramp = .measuring(count: next, since: now, bytesAtStart: bytesWritten, previous: (count, rate))
        return fill(now: now)
    }

    /// How many bytes each connection must bring in a measuring window (``rampBytesPerConnection``, at most half a
    /// minimum segment); the warm-up is half of it.
    private var rampBytesPerConnection: Int64 {
        min(Self.rampBytesPerConnection, max(settings.minimumSegmentLength / 2, 1))
    }

    /// Stops the newest connections beyond the target; their ranges go back to be taken by others.
    private mutating func retireExtraConnections() -> [Action] {
        let working = connections.filter { !$0.value.stopped }.keys.sorted()
        guard working.count > target else { return [] }
        return working.suffix(working.count - target).map { id in
            connections[id]?.stopped = true
            return .stop(connection: id)
        }
    }

    /// Lets each working connection whose answer goes on past its end read on into the bytes right after it that
    /// nobody has or fetches, as far as its answer carries them: after the count came down, no newcomer takes those
    /// bytes soon, and a server that turns extra connections away may turn away the request for them too, while the
    /// first answer (a `200` carrying the whole file) already brings them.
    private mutating func readOnIntoUnclaimedBytes() {
        for id in connections.keys.sorted() {
            // Not one that reached its end: its transfer is being ended (``wrote(connection:count:now:)`` said so).
            guard let connection = connections[id], connection.accepted, !connection.stopped,
                connection.next < connection.end, connection.end < connection.covers
            else { continue }
            // Its own range ends where the search starts: only others' bytes and the file's can be in the way.
            guard let gap = claimed.gaps(in: connection.end..<connection.covers).first,
                gap.lowerBound == connection.end
            else { continue }
            connections[id]?.end = gap.upperBound
        }
    }

    private mutating func stopAll() -> [Action] {
        connections.keys.sorted().map { id in
            connections[id]?.stopped = true
            return .stop(connection: id)
        }
    }

    // MARK: - Splitting

    /// Opens connections until the target is reached or no work is left to give; with `continuing`, the first one
    /// opened goes on from a connection that just finished its piece.
    private mutating func fill(now: ContinuousClock.Instant, continuing: Bool = false) -> [Action] {
        var actions: [Action] = []
        var wanted = target - connections.values.filter { !$0.stopped }.count
        guard wanted > 0 else { return [] }
        // Several at once (the first split, a step of the automatic count): every connection ends up with an even
        // share, so that all of them end together instead of one long segment finishing alone.
        var share: Int64?
        if wanted > 1 {
            share = rebalance(newcomers: wanted)
        } else if let piece = pieceLength {
            // One newcomer (the first split of two connections, the next piece): nobody keeps more than a piece, so
            // that the newcomer's is the first one nobody fetches.
            cap(at: piece)
        }
        while wanted > 0, let range = takeWork(sharingWith: wanted, share: share, now: now) {
            actions.append(open(range, now: now, continuesPiece: continuing && actions.isEmpty))
            wanted -= 1
        }
        return actions
    }

    /// A new connection for `range`.
    private mutating func open(_ range: Range<Int64>, now: ContinuousClock.Instant, continuesPiece: Bool = false)
        -> Action
    {
        let id = nextIdentifier
        nextIdentifier += 1
        connections[id] = Connection(
            requested: range, next: range.lowerBound, end: range.upperBound, covers: range.upperBound, accepted: false,
            continuesPiece: continuesPiece, lastActivity: now, writtenAtLastActivity: bytesWritten, requestedAt: now)
        return .request(connection: id, range: range)
    }

    /// The bytes nobody has or fetches.
    private var claimed: ByteRangeSet {
        var claimed = present
        for connection in connections.values where connection.next < connection.end {
            claimed.insert(connection.next..<connection.end)
        }
        return claimed
    }

    /// Before `newcomers` connections start at once: each working connection keeps an even share of what is left
    /// (never leaving a piece under the minimum), at most ``Settings/pieceLength``, and gives up the rest, which
    /// nobody fetches until the newcomers take it. Returns the share.
    private mutating func rebalance(newcomers: Int) -> Int64 {
        let minimum = max(settings.minimumSegmentLength, 1)
        let working = connections.filter { !$0.value.stopped }
        let left = total - claimed.count + working.values.reduce(0) { $0 + max($1.end - $1.next, 0) }
        var share = max(minimum, left / Int64(working.count + newcomers))
        if let piece = pieceLength { share = min(share, piece) }
        cap(at: share)
        return share
    }

    /// Every working connection keeps at most `share` of what it has left, unless that would leave a piece under the
    /// minimum; the rest is nobody's until a newcomer takes it.
    private mutating func cap(at share: Int64) {
        let minimum = max(settings.minimumSegmentLength, 1)
        for (id, connection) in connections
        where !connection.stopped && connection.end - connection.next - share >= minimum {
            connections[id]?.end = connection.next + share
        }
    }

    /// The most a connection is given at a time, when pieces are on and more than one connection is wanted: a single
    /// connection (the automatic count back at one) fetches in file order anyway, and a piece each would only cost
    /// it a request per piece (measured: 120 requests for the rest of a GiB after `auto` went back to one).
    private var pieceLength: Int64? {
        guard target > 1 else { return nil }
        return settings.pieceLength.map { max($0, settings.minimumSegmentLength, 1) }
    }

    /// The next range for a new connection: the first one nobody fetches (at most `share` of it, or an even share
    /// among the `newcomers`; at most a piece), else a share of the largest remaining segment, else, at the end, half
    /// of a segment that would take long to end (``takeEndgameWork(now:)``).
    private mutating func takeWork(
        sharingWith newcomers: Int, share: Int64? = nil, now: ContinuousClock.Instant
    ) -> Range<Int64>? {
        let minimum = max(settings.minimumSegmentLength, 1)
        if let gap = claimed.gaps(in: 0..<total).first {
            var share = share ?? max(minimum, (gap.upperBound - gap.lowerBound) / Int64(newcomers))
            if let piece = pieceLength { share = min(share, piece) }
            let end = gap.upperBound - gap.lowerBound - share < minimum ? gap.upperBound : gap.lowerBound + share
            return gap.lowerBound..<end
        }
        // Steal: the connection with the most left keeps an even share, the newcomers the rest.
        let candidates = connections.filter { !$0.value.stopped && $0.value.end - $0.value.next >= 2 * minimum }
        guard
            let (id, victim) = candidates.max(by: {
                ($0.value.end - $0.value.next, $1.key) < ($1.value.end - $1.value.next, $0.key)
            })
        else { return takeEndgameWork(now: now) }
        let remaining = victim.end - victim.next
        let keep = max(minimum, remaining / Int64(newcomers + 1))
        let split = victim.next + keep
        guard victim.end - split >= minimum else { return nil }
        let stolen = split..<victim.end
        connections[id]?.end = split
        if newcomers > 1 {
            // Leave the rest of the stolen range unclaimed for the next newcomers: each takes an even share of it.
            let share = max(minimum, (stolen.upperBound - stolen.lowerBound) / Int64(newcomers))
            if stolen.upperBound - stolen.lowerBound - share >= minimum {
                return stolen.lowerBound..<(stolen.lowerBound + share)
            }
        }
        return stolen
    }

    /// The end of the download: no segment is left to split at the minimum length, yet a connection that finished
    /// would wait for the last ones. It takes the second half of the segment with the most bytes left, when that is
    /// at least two ``endgamePieceLength``s and, at the rate its connection brought bytes so far, takes at least
    /// ``endgameLatencyFactor`` times the longest latency of a request in this phase: the newcomer's half then
    /// arrives while the segment would still be arriving. A connection slower than the others (a congested path, a
    /// server that paused it) no longer holds up to two minimum segments alone while the others wait. A segment that
    /// brought nothing yet is not judged (a stall is ``tick(now:)``'s), nor is one before any request's latency was
    /// seen.
    private mutating func takeEndgameWork(now: ContinuousClock.Instant) -> Range<Int64>? {
        guard let latency = longestLatency else { return nil }
        let candidates = connections.filter { _, connection in
            let remaining = connection.end - connection.next
            let brought = connection.next - connection.firstBytePosition
            guard connection.accepted, !connection.stopped, remaining >= 2 * Self.endgamePieceLength, brought > 0,
                let firstByteAt = connection.firstByteAt
            else { return false }
            // The ratio is capped: a rest a million times what arrived is long enough, and the product stays finite.
            let timeLeft = (now - firstByteAt) * min(Double(remaining) / Double(brought), 1_000_000)
            return timeLeft >= latency * Self.endgameLatencyFactor
        }
        // The most bytes left; the lowest identifier among equals, as ``takeWork(sharingWith:share:now:)`` chooses.
        guard
            let (id, victim) = candidates.max(by: {
                ($0.value.end - $0.value.next, $1.key) < ($1.value.end - $1.value.next, $0.key)
            })
        else { return nil }
        let split = victim.next + (victim.end - victim.next) / 2
        connections[id]?.end = split
        return split..<victim.end
    }

    /// The last connection working holds the download's end: its rest (at most a minimum segment, which
    /// ``takeEndgameWork(now:)`` did not split) is stopped and asked on a fresh connection when its answer goes on past
    /// its end and it fell silent for longer than its rest should take at its rate so far, longer than the shortest
    /// request of this phase took to bring its first byte, and longer than ``tailSilenceFloor``.
    ///
    /// Why: a server that paces a response in bursts (nginx under `limit_rate` sends `sendfile_max_chunk`, then waits
    /// a burst's time) delivers the bytes of an answer that goes on past the segment's end only with the burst that
    /// carries them, up to a burst's time after the others ended (256 KiB at 8 MiB/s: 31 ms; nginx's default 2 MiB:
    /// 250 ms), while a range that ends there is sent at once. Only the last connection is judged, and only when no
    /// other is open (and the count allows another): while another works, it takes the end game's share when it
    /// finishes. A connection that was only late costs one request and the bytes it had in flight, once: a retaken
    /// rest is never retaken, and a trickle (whose rest takes long at its own rate) is left to the stall check.
    private mutating func retakeTail(now: ContinuousClock.Instant) -> [Action] {
        guard connections.count == 1, connections.count < target, let (id, victim) = connections.first,
            victim.accepted, !victim.stopped, !victim.retakesTail, victim.covers > victim.end,
            let firstByteAt = victim.firstByteAt
        else { return [] }
        let remaining = victim.end - victim.next
        let brought = victim.next - victim.firstBytePosition
        guard remaining > 0, remaining <= max(settings.minimumSegmentLength, 1), brought > 0 else { return [] }
        // The ratio is capped as in the end game, so that the product stays finite.
        let pace = (now - firstByteAt) * min(Double(remaining) / Double(brought), 1_000_000)
        guard let latency = shortestLatency, now - victim.lastActivity > max(pace, latency, Self.tailSilenceFloor)
        else { return [] }
        let rest = victim.next..<victim.end
        connections[id]?.end = victim.next
        connections[id]?.stopped = true
        let request = open(rest, now: now)
        if case .request(let newcomer, _) = request { connections[newcomer]?.retakesTail = true }
        return [.stop(connection: id), request]
    }
}
