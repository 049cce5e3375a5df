import Foundation

#if canImport(Glibc)
    import Glibc
#endif

extension DownloadEngine {
    /// Feeds responses from the transport into the state machine and the file.
    struct Consumer: ResponseConsumer {
        let engine: DownloadEngine
        /// 0 for the request the machine planned; others are segments of a multi-connection phase.
        var connection = 0

        func receive(_ head: ResponseHead) -> Bool {
            engine.receive(head, connection: connection)
        }

        func receive(_ body: UnsafeRawBufferPointer) throws(ResumableError) {
            try engine.receive(body, connection: connection)
        }
    }

    /// Thrown to end a segment's transfer when its range is complete (it may have asked for more).
    static let segmentComplete = ResumableError(.cancelled, "the segment is complete")

    /// Judges a head and performs the decision; `false` stops the request unread.
    private func receive(_ head: ResponseHead, connection: Int) -> Bool {
        if state.withLock({ $0.segments != nil }) {
            return receiveSegment(head, connection: connection)
        }
        let decided = state.withLock { (state) -> (ResumeStateMachine, ResumeStateMachine.BodyPlan)? in
            guard state.stop == nil, !state.ended else { return nil }
            let before = state.machine
            switch state.machine.receive(head) {
            case .skipBody(let outcome):
                state.headOutcome = outcome
                return nil
            case .writeBody(let plan):
                return (before, plan)
            }
        }
        guard let (before, plan) = decided else { return false }
        let basis = worthwhileSegmentBasis()
        if let reason = plan.newFile {
            // The old file stays until this answer's first byte (``DownloadEngine/PendingRestart``), and so does the
            // token on disk, which names it; so does a multi-connection phase, which would write into the file.
            state.withLock { state in
                state.progress.transferStart = plan.offset
                state.pendingRestart = PendingRestart(
                    reason: reason, before: before, event: plan.event, segments: basis)
            }
            emitProgress()
            return true
        }
        let (token, file) = state.withLock { state in
            state.progress.transferStart = plan.offset
            return (state.machine.state.token(), state.file)
        }
        events.send(plan.event)
        emitProgress()
        // A hand-off before the first byte is still a hand-off: record the accepted response at once.
        checkpoints.schedule(token, file: file)
        if let basis { beginSegments(basis) }
        return true
    }

    /// The basis for a multi-connection phase from the response just accepted, when the machine allows one and it is
    /// worthwhile.
    private func worthwhileSegmentBasis() -> ResumeStateMachine.SegmentBasis? {
        let settings = segmentSettings
        return state.withLock { state -> ResumeStateMachine.SegmentBasis? in
            guard state.stop == nil, let basis = state.machine.segmentBasis(),
                SegmentSchedule.isWorthwhile(basis, settings: settings)
            else { return nil }
            return basis
        }
    }

    /// Starts a multi-connection phase from the response just accepted: this response becomes the first segment, and
    /// the transfer loop opens the others, then preallocates the file to its full length.
    private func beginSegments(_ basis: ResumeStateMachine.SegmentBasis) {
        let settings = segmentSettings
        let signals = state.withLock { state in
            state.preallocation = basis.total
            state.machine.enterSegments()
            var schedule = SegmentSchedule(basis: basis, settings: settings, probeConnection: 0)
            state.pendingActions += schedule.start().actions
            state.segments = schedule
            return state.signals
        }
        signals?.yield(.wake)
    }

    /// Judges a segment's head through the machine and records the verdict in the schedule.
    private func receiveSegment(_ head: ResponseHead, connection: Int) -> Bool {
        state.withLock { state in
            guard state.stop == nil, !state.ended,
                let requested = state.segments?.requestedRange(connection: connection)
            else { return false }
            let verdict = state.machine.judgeSegment(head, requested: requested)
            return state.segments?.head(
                connection: connection, verdict: verdict, framedByLength: head.isFramedByContentLength) ?? false
        }
    }

    /// Writes a piece of an accepted body where the machine, or the schedule of a multi-connection phase, says.
    private func receive(_ body: UnsafeRawBufferPointer, connection: Int) throws(ResumableError) {
        // Nothing to write, nothing to record: an empty piece never leads to a token (one taken while a restart is
        // pending would name the old file under the new answer's state).
        guard !body.isEmpty else { return }
        try receivePiece(body, connection: connection, evenIfStopped: false)
    }

    /// The first piece of an answer that restarts the download, which the machine accepts: the new file takes the old
    /// one's place now, and the piece is written into it. The restart stays pending until the switch is done, so that
    /// a request ending before that goes back to the old file.
    private func switchAndReceive(
        _ pending: PendingRestart, _ body: UnsafeRawBufferPointer, connection: Int
    ) throws(ResumableError) {
        let switched: Bool
        do throws(ResumableError) {
            switched = try switchFile(pending.reason, restoring: pending.before, unlessStopped: true)
        } catch {
            state.withLock { state in
                state.pendingRestart = nil
                state.headOutcome = .fail(error)
            }
            throw error
        }
        // A stop came during the switch, which went back to the old file: the loop restores the machine.
        guard switched else {
            throw checkpoints.failure ?? ResumableError(.cancelled, "the download was cancelled")
        }
        state.withLock { $0.pendingRestart = nil }
        // The switch recorded the token naming the new file; this answer is the first segment from here on.
        if let basis = pending.segments { beginSegments(basis) }
        // The event first: a piece that completes the first segment ends its transfer by throwing.
        events.send(pending.event)
        // The old bytes are gone now: this piece is written even when a stop came since (from the restarted event's
        // handler, say), so that the task ends with a token for it rather than with nothing.
        try receivePiece(body, connection: connection, evenIfStopped: true)
    }

    /// Writes a piece of an accepted body where the machine, or the schedule of a multi-connection phase, says;
    /// `evenIfStopped`: also when a stop was asked for (the first piece after a restart's switch).
    private func receivePiece(
        _ body: UnsafeRawBufferPointer, connection: Int, evenIfStopped: Bool
    ) throws(ResumableError) {
        let count = body.count
        // One lock per piece on the single-connection path: whether a multi-connection phase owns the body, or a
        // restart waits for this piece, is checked inside it.
        var restart: PendingRestart?
        let single = try state.withLock {
            (state) throws(ResumableError) -> (emit: Bool, checkpoint: ResumeToken?, complete: Bool)? in
            if state.segments != nil { return nil }
            guard state.stop == nil || evenIfStopped, !state.ended else {
                throw ResumableError(.cancelled, "the download was cancelled")
            }
            // A token that could not be written stops the download: it never continues unrecorded.
            if let failure = checkpoints.failure { throw failure }
            // A restart switches files only for a piece the machine accepts: one it refuses must not cost the old file.
            if let pending = state.pendingRestart {
                var trial = state.machine
                if try trial.receiveBody(upTo: count).count > 0 {
                    restart = pending
                    return nil
                }
            }
            let (position, accepted) = try state.machine.receiveBody(upTo: count)
            do throws(ResumableError) {
                try state.file.write(UnsafeRawBufferPointer(rebasing: body[0..<accepted]), at: position)
            } catch {
                state.machine.revertBody(to: position)
                throw error
            }
            let offset = state.machine.state.offset
            if let hasher = state.hasher {
                // A copy for the hashing thread, so that it need not read these bytes back from the file.
                hasher.keep(UnsafeRawBufferPointer(rebasing: body[0..<accepted]), at: position)
                hasher.advance(to: offset)
            }
            if offset - state.writebackStart >= Self.writebackChunk {
                let (start, file) = (state.writebackStart, state.file)
                state.writebackStart = offset
                writebackQueue.async { file.startWriteback(offset: start, count: offset - start) }
            }
            let emit = state.progress.add(count)
            let checkpoint = checkpoints.claimPeriodic() ? state.machine.state.token() : nil
            return (emit, checkpoint, state.machine.bodyIsComplete)
        }
        if let restart { return try switchAndReceive(restart, body, connection: connection) }
        guard let (emit, checkpoint, complete) = single else {
            return try receiveSegment(body, connection: connection, evenIfStopped: evenIfStopped)
        }
        if emit { emitProgress() }
        if let checkpoint { checkpoints.schedule(checkpoint, file: state.withLock { $0.file }) }
        passRateLimiters(count, connection: nil, complete: complete)
        // The answer went on past the gap it fills: the rest is bytes already on disk.
        if complete { throw Self.segmentComplete }
        if let rate = configuration.simulatedWriterBytesPerSecond, rate > 0 {
            usleep(useconds_t(min(Double(count) / Double(rate) * 1e6, 1e6)))
        }
    }

    /// Writes a piece of a segment's body at the connection's position; throws ``segmentComplete`` to end the
    /// transfer once its range is complete.
    ///
    /// The write itself runs outside the lock, so connections write in parallel. That is safe: a connection's
    /// position moves only on its own thread, the bytes count as present only once written
    /// (``SegmentSchedule/wrote(connection:count:now:)``), and the file is never released or switched while a
    /// transfer runs (the transfer loop waits for every connection first). Bytes of a range another connection took
    /// over meanwhile are the same representation's (same strong validator), so writing them twice changes nothing.
    private func receiveSegment(
        _ body: UnsafeRawBufferPointer, connection: Int, evenIfStopped: Bool = false
    ) throws(ResumableError) {
        // A piece cut at the connection's end is written on when the end moved meanwhile (the schedule let it read
        // on after another connection was turned away): the answer is contiguous, so the rest belongs at the new
        // position. The transfer ends only once the schedule says the range is complete.
        var offset = 0
        while offset < body.count {
            let piece = UnsafeRawBufferPointer(rebasing: body[offset...])
            let (placement, file) = try state.withLock {
                (state) throws(ResumableError) -> ((position: Int64, count: Int)?, PartialFile) in
                guard state.stop == nil || evenIfStopped, !state.ended else {
                    throw ResumableError(.cancelled, "the download was cancelled")
                }
                if let failure = checkpoints.failure { throw failure }
                return (state.segments?.placement(connection: connection, count: piece.count), state.file)
            }
            guard let (position, count) = placement else { throw Self.segmentComplete }
            try file.write(UnsafeRawBufferPointer(rebasing: piece[0..<count]), at: position)
            let (emit, checkpoint, complete, answerIsOver) = state.withLock {
                state -> (Bool, (ResumeToken, PartialFile)?, Bool, Bool) in
                let complete = state.segments?.wrote(connection: connection, count: count) ?? true
                let answerIsOver =
                    complete && count == piece.count && state.segments?.answerIsOver(connection: connection) == true
                if let hasher = state.hasher, let prefix = state.segments?.present.prefixLength {
                    hasher.advance(to: prefix)
                }
                if let written = state.segments?.bytesWritten, written - state.writebackStart >= Self.writebackChunk {
                    // Segments write all over the file: start writing back everything dirty so far.
                    let file = state.file
                    state.writebackStart = written
                    writebackQueue.async { file.startWriteback(offset: 0, count: 0) }
                }
                let emit = state.progress.add(count)
                var checkpoint: (ResumeToken, PartialFile)?
                if checkpoints.claimPeriodic(), let present = state.segments?.present {
                    state.machine.segmentsProgressed(present)
                    checkpoint = (state.machine.state.token(), state.file)
                }
                return (emit, checkpoint, complete, answerIsOver)
            }
            if emit { emitProgress() }
            if let (token, file) = checkpoint { checkpoints.schedule(token, file: file) }
            // Every byte received counts against the limits, those past the range too.
            passRateLimiters(complete ? piece.count : count, connection: connection, complete: complete)
            offset += count
            guard complete else { continue }
            // A response that ends with its segment ends by itself: stopping it would close its connection, which the
            // next segment (a piece, a stolen range) can reuse.
            if answerIsOver { return }
            throw Self.segmentComplete
        }
    }

    /// Lets a piece of `count` body bytes, just written, pass the task's rate limiters
    /// (``DownloadTask/Configuration/rateLimiters``): blocks until all of them allow it, or until the download stops.
    ///
    /// This runs on the transport's thread, never on Swift's cooperative pool: libcurl calls the consumer on the
    /// transfer's own thread, URLSession on the session's delivery queue (an `OperationQueue` on a Dispatch worker
    /// thread). Holding that thread is the backpressure a slow disk gives: curl stops reading, the socket buffers
    /// fill, and TCP holds the server back. The bytes are on disk and counted before the wait, so a pause during it
    /// loses nothing; a stop request (pause, cancel, deadline) ends the wait within one ``RateLimiter/slice``.
    ///
    /// On a segment's connection the wait also ends when the schedule stopped it or gave the rest of its range to
    /// another (its transfer ends at the next piece anyway), and it keeps the connection from looking stalled: a
    /// connection held by the limit delivers at the limit's pace, it is not stuck.
    private func passRateLimiters(_ count: Int, connection: Int?, complete: Bool) {
        let limiters = configuration.rateLimiters
        guard !limiters.isEmpty else { return }
        let shouldStop = { () -> Bool in
            self.state.withLock { state in
                if state.stop != nil || state.ended { return true }
                guard let connection, state.segments != nil else { return false }
                if !complete, state.segments?.placement(connection: connection, count: 1) == nil { return true }
                // Counts as activity for the stall check, and writes nothing.
                state.segments?.touch(connection: connection)
                return false
            }
        }
        for limiter in limiters {
            limiter.waitForPermission(count, shouldStop: shouldStop)
        }
    }

    func emitProgress() {
        let progress = state.withLock { state in
            state.progress.report(
                bytesOnDisk: state.segments?.present.count ?? state.machine.state.bytesOnDisk,
                expectedLength: state.machine.state.expectedLength,
                connections: state.segments?.activeCount ?? 1)
        }
        events.send(.progress(progress))
    }
}
