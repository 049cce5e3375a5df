import Foundation
import Synchronization

/// Performs what ``ResumeStateMachine`` decides: sends requests through a transport, starts new temporary
/// files when bytes are dropped, writes accepted bodies, records tokens, retries transient failures, and
/// moves the finished file into place. It owns the I/O and the threads; it decides nothing.
///
/// The order of steps on disk is the point (`docs/reliability.md`): a new version is written into a new
/// temporary file, and the token is switched to it — durably — before the old file goes; a token is handed
/// over only after the bytes it covers were flushed; a failed token write stops the download.
final class DownloadEngine: Sendable {
    /// Why the engine was asked to stop.
    enum StopMode: Equatable, Sendable {
        /// Keep the temporary file: a token will be produced; the task ends with ``ResumableError/Code/paused``
        /// and this message.
        case pause(String)
        /// Keep the temporary file: ``DownloadTask/Configuration/deadline`` passed; the task ends with
        /// ``ResumableError/Code/timedOut``.
        case deadline(Duration)
        /// Delete the temporary file; the task ends with ``ResumableError/Code/cancelled``.
        case discard
    }

    struct State {
        var machine: ResumeStateMachine
        /// The temporary file being written; replaced when the machine drops the bytes on disk.
        var file: PartialFile
        var stop: StopMode?
        var headOutcome: ResumeStateMachine.Outcome?
        var progress: ProgressMeter
        /// Where the next early writeback starts.
        var writebackStart: Int64 = 0
        /// Set when the run loop ended: late transport callbacks are refused.
        var ended = false
        /// Set by ``conclude(_:)``, which a complete download runs right after finishing, on the same thread.
        var concluded = false
        /// The token the task ended with, once flushed.
        var finalToken: ResumeToken?
        /// Whether bytes on disk were dropped and the download started again from byte 0.
        var restarted = false
        /// Hashes the file's contiguous prefix while the download runs, when a digest is wanted; replaced with the
        /// file, cancelled before the file is released.
        var hasher: PrefixHasher?
        /// The multi-connection phase in progress, if any (``DownloadEngine+Segments.swift``).
        var segments: SegmentSchedule?
        /// The length to preallocate the file to, once the transfer loop has opened the first segments' connections.
        var preallocation: Int64?
        /// The most connections a multi-connection phase opens from now on: what an earlier phase of this task was
        /// pushed down to (``SegmentSchedule/loweredTo``); `nil` while none was.
        var connectionCeiling: Int?
        /// Actions the schedule decided on a transport's thread, for the transfer loop to perform.
        var pendingActions: [SegmentSchedule.Action] = []
        /// Wakes the transfer loop of the current request.
        var signals: AsyncStream<ConnectionSignal>.Continuation?
        /// A restart the accepted answer asked for, waiting for that answer's first byte (``PendingRestart``).
        var pendingRestart: PendingRestart?
        /// The new, empty file of a switch that a stop undid although the old file's token could not be recorded again:
        /// the token on disk may name it. It is removed once a token naming the task's file is recorded.
        var abandonedFile: PartialFile?
    }

    /// A restart decided at an answer's head (``ResumeStateMachine/BodyPlan/newFile``) and performed at its first
    /// body byte, not before: until then the old file and the token naming it stay as they are. An answer cut, turned
    /// away or paused before its first byte so loses nothing: the machine goes back to `before` and the bytes on
    /// disk stay described, although nothing of the new answer ever reached the disk.
    struct PendingRestart {
        var reason: RestartReason
        /// The machine as it was before the answer's head was judged: it describes the old file.
        var before: ResumeStateMachine
        /// The event that reports the accepted answer, sent once the switch is done.
        var event: DownloadEvent
        /// The multi-connection phase the answer starts once the switch is done, if one is worthwhile: no other
        /// connection writes into the file before that.
        var segments: ResumeStateMachine.SegmentBasis?
    }

    let configuration: DownloadTask.Configuration
    let finisher: Finisher
    /// The offset this task started at (the token's, reconciled with the file).
    let initialOffset: Int64
    let events: EventHub
    let checkpoints: CheckpointWriter
    /// How many written bytes trigger an early writeback, so the final flush has little left to do.
    static let writebackChunk: Int64 = 8 << 20
    let writebackQueue = DispatchQueue(label: "Resumable.writeback")
    let state: Mutex<State>

    /// The file a resume copied its bytes from into ``State/file``'s directory (``DownloadTask/resume(from:destination:replacingURL:configuration:)``):
    /// kept and locked until the task ends, then removed; unless the task ends with no token naming the copy (its last
    /// flush failed, and no checkpoint handler recorded one): the copy goes then, and this file stays for the caller's
    /// token.
    let relocatedFrom: PartialFile?

    init(
        machine: ResumeStateMachine,
        file: PartialFile,
        configuration: DownloadTask.Configuration,
        existingFile: DownloadTask.ExistingFilePolicy,
        relocatedFrom: PartialFile? = nil
    ) {
        self.relocatedFrom = relocatedFrom
        self.state = Mutex(
            State(
                machine: machine, file: file,
                progress: ProgressMeter(interval: configuration.progressInterval, offset: machine.state.offset)))
        self.events = EventHub(handler: configuration.eventHandler)
        self.configuration = configuration
        self.finisher = Finisher(
            destination: machine.state.destination, existingFile: existingFile, claims: configuration.finalPathClaims,
            owner: configuration.finalPathOwner)
        self.initialOffset = machine.state.offset
        self.checkpoints = CheckpointWriter(checkpointing: configuration.checkpointing, path: file.path)
        if configuration.computesSHA256 || machine.state.expectedSHA256 != nil {
            let hasher = PrefixHasher(file: file)
            // The bytes already on disk are hashed while the rest arrives.
            if machine.state.offset > 0 { hasher.advance(to: machine.state.offset) }
            state.withLock { $0.hasher = hasher }
        }
    }

    /// Asks the run loop to stop; the caller cancels the task running ``run()``.
    func requestStop(_ mode: StopMode) {
        state.withLock { state in
            if state.stop == nil { state.stop = mode }
        }
    }

    /// Whether ``requestStop(_:)`` was called.
    var isStopRequested: Bool {
        state.withLock { $0.stop != nil }
    }

    /// The token the task ended with: `nil` while it runs, after it finished, or when nothing can be resumed.
    func makeToken() -> ResumeToken? {
        state.withLock { $0.finalToken }
    }

    // MARK: - The run loop

    /// Downloads until the file is complete, a permanent failure, the retries run out, or a stop.
    ///
    /// On failure the temporary file is flushed and kept, and the error carries a token, when there is
    /// something to resume; otherwise the temporary file is removed.
    func run() async -> Result<DownloadResult, ResumableError> {
        let result = await loopUntilDeadline()
        // Flushing, the last checkpoints and waiting for the writeback block on the disk: not on the pool. A
        // complete download was concluded already, on the thread that finished it.
        let concluded =
            state.withLock({ $0.concluded }) ? result : await Self.offThePool { self.conclude(result) }
        events.finish()
        return concluded
    }

    /// Runs `work`, which may block on the disk (fdatasync, a checkpoint handler, hashing a file), on a thread of
    /// its own, so that no thread of Swift's cooperative pool (two on a two-core machine) waits for the disk: an
    /// application's other tasks go on meanwhile. Not a global dispatch queue: on Linux its width is the number of
    /// cores, and a caller's blocked callbacks there could leave no thread for the work, which waits on the
    /// download's own serial queues. A task needs at most a few such threads (a restart, finishing, ending), which
    /// are reused (``ReusedThreads``).
    static func offThePool<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            ReusedThreads.disk.run { continuation.resume(returning: work()) }
        }
    }

    /// Ends the task: keeps or removes the temporary file, brings the token on disk up to date, and releases the
    /// file. Blocks on the disk.
    private func conclude(_ result: Result<DownloadResult, ResumableError>) -> Result<DownloadResult, ResumableError> {
        var result = result
        // Whether the file a resume copied its bytes from stays: only when no token names the copy.
        var keepsRelocatedFrom = false
        // Whether the task's last token was recorded: the finished file's (in `finish()`), or the one handed out below.
        var recorded = false
        let (file, hasher) = state.withLock { state in
            state.concluded = true
            return (state.file, state.hasher)
        }
        // The hasher reads the file: it stops before the file is released.
        hasher?.cancel()
        switch result {
        case .success(let downloaded):
            recorded = true
            events.send(.finished(downloaded))
        case .failure(var error):
            let (discard, candidate) = state.withLock { state in
                (
                    state.stop == .discard,
                    state.machine.state.bytesOnDisk > 0
                        ? state.machine.state.token() : nil
                )
            }
            // A token is handed out only for bytes that reached the disk: a failed flush means none.
            var token: ResumeToken?
            if !discard, let candidate, (try? file.synchronize()) != nil {
                token = candidate
                // Bring the token on disk up to date; the one there already describes a prefix if this fails.
                recorded = (try? checkpoints.record(candidate)) != nil
            }
            if token == nil && (discard || candidate == nil) {
                // Nothing is left to resume: a token saved before must not outlive the file it names. It goes first,
                // so a crash in between leaves at most a file without a token, never a token without its bytes.
                if configuration.checkpointing?.abandoned?(file.path) ?? true { file.remove() }
            } else if token == nil, relocatedFrom != nil, configuration.checkpointing == nil {
                // The flush failed after a resume into another directory, and no handler recorded a token naming the
                // copy: the caller's token, which names the file the bytes were copied from, is all there is. That
                // file stays, untouched since the resume; the copy, which nothing names, goes.
                keepsRelocatedFrom = true
                file.remove()
            }
            error.resumeToken = token
            state.withLock { $0.finalToken = token }
            result = .failure(error)
        }
        // No checkpoint may flush or report after the task ended, nor after the file is released.
        let abandoned = state.withLock { state in
            state.ended = true
            defer { state.abandonedFile = nil }
            return state.abandonedFile
        }
        if let abandoned {
            // No token names an undone switch's file any more once the task's last token was recorded (finished, or
            // one naming the old file) or once nothing stays (cancelled, through the handler as for the task's file).
            let discarded = state.withLock { $0.stop == .discard }
            if recorded || (discarded && configuration.checkpointing?.abandoned?(abandoned.path) ?? true) {
                abandoned.remove()
            }
            abandoned.release()
        }
        checkpoints.end()
        writebackQueue.sync {}
        // Every token since the resume names the copy: the file it was copied from goes.
        if let relocatedFrom {
            if !keepsRelocatedFrom { relocatedFrom.remove() }
            relocatedFrom.release()
        }
        if case .success = result { configuration.checkpointing?.finished?(file.path) }
        // Another task or process may take the file over from here on.
        file.release()
        return result
    }

    /// Runs ``loop()``, stopping it when ``DownloadTask/Configuration/deadline`` passes: the transfer is cancelled
    /// and the task ends with a token, as a pause does.
    private func loopUntilDeadline() async -> Result<DownloadResult, ResumableError> {
        guard let limit = configuration.deadline else { return await loop() }
        let deadline = ContinuousClock.now.advanced(by: min(max(limit, .zero), .seconds(1_000_000_000)))
        return await withTaskGroup(of: Result<DownloadResult, ResumableError>?.self) { group in
            group.addTask { await self.loop() }
            group.addTask {
                try? await Task.sleep(until: deadline, clock: .continuous)
                return nil
            }
            while let next = await group.next() {
                if let result = next {
                    group.cancelAll()
                    return result
                }
                if !Task.isCancelled { requestStop(.deadline(limit)) }
                group.cancelAll()
            }
            return .failure(ResumableError(.cancelled, "the download was cancelled"))
        }
    }

    private func loop() async -> Result<DownloadResult, ResumableError> {
        // One transport session for the whole task: its requests share connections where the transport can. A shared
        // session (a queue's) is used through a lease, whose closing leaves the shared session open.
        let session: any TransportSession
        do {
            if let shared = configuration.sharedSession {
                session = shared.lease()
            } else {
                session = try configuration.transport.makeSession()
            }
        } catch {
            return .failure(error)
        }
        defer { session.close() }
        var limits = AttemptLimits(
            maximumRetries: configuration.retry.maximumRetries, maximumRedirects: configuration.maximumRedirects)
        while true {
            if let stopped = stoppedError() { return .failure(stopped) }
            let (before, plan, asked) = state.withLock { state in
                state.headOutcome = nil
                let before = state.machine
                let plan = state.machine.nextRequest()
                return (before, plan, state.machine.state.askedLength)
            }
            do throws(ResumableError) {
                if let reason = plan.newFile {
                    _ = try await Self.offThePool {
                        Result { () throws(ResumableError) in try self.switchFile(reason, restoring: before) }
                    }.get()
                } else {
                    // Bytes beyond the offset (or the last completed range) are not trusted: cut them off before asking
                    // for the rest.
                    try state.withLock { $0.file }.truncate(to: plan.trustedLength)
                }
            } catch {
                return .failure(error)
            }
            // Progress is measured against the bytes kept before the request was planned (see AttemptLimits).
            let bytesBefore = before.state.bytesOnDisk
            let ended = await transfer(transportRequest(plan.request), session: session)
            // A restart whose answer ended before its first byte: done only if that answer was a whole, empty file;
            // otherwise the old file stays the task's, described by the machine as it was before that answer.
            let unswitched = state.withLock { state in
                defer { state.pendingRestart = nil }
                return state.pendingRestart
            }
            if let stopped = stoppedError() {
                if let unswitched { state.withLock { $0.machine = unswitched.before } }
                return .failure(stopped)
            }
            // Progress is throttled while bytes arrive; report where this response left the file.
            emitProgress()
            let missing = before.state.missingLength
            let (outcome, gained, bodyEnded) = state.withLock { state -> (ResumeStateMachine.Outcome, Int64, Bool) in
                let outcome: ResumeStateMachine.Outcome
                // Whether the outcome is that of a body that was read to its end (not of a head: a redirect, a
                // fall-back to the original URL, an answer dropped unread).
                let bodyEnded: Bool
                // How many answers the bytes count for: a phase that never brought the floor's worth counts as one
                // attempt bringing what each of its answers brought on average, so many connections cut after 2,000
                // bytes each add up no faster than one connection cut so, and a phase that was one connection (the
                // others turned away) counts its bytes as that connection's.
                var answers = 1
                switch ended {
                case .single(let transportError):
                    bodyEnded = state.headOutcome == nil
                    outcome = state.headOutcome ?? state.machine.responseEnded(error: transportError)
                case .segments(let outcomeOfSegments, let progressed, let joined):
                    bodyEnded = false
                    outcome = outcomeOfSegments
                    if !progressed { answers = max(joined, 1) }
                }
                if let unswitched {
                    if case .finished = outcome {} else { state.machine = unswitched.before }
                }
                return (outcome, max(state.machine.state.bytesOnDisk - bytesBefore, 0) / Int64(answers), bodyEnded)
            }
            switch outcome {
            case .finished:
                // Finished and concluded on one thread: one hop off the pool, not two.
                return await Self.offThePool {
                    if let unswitched {
                        // The new answer was a whole file without a byte. An expected digest it cannot have keeps the
                        // old bytes: nothing of the new version would be left to check.
                        let expected = self.state.withLock { $0.machine.state.expectedSHA256 }
                        if let expected, expected != Self.emptySHA256 {
                            self.state.withLock { $0.machine = unswitched.before }
                            return self.conclude(
                                .failure(
                                    ResumableError(
                                        .checksumMismatch,
                                        "the server's file is now empty, whose SHA-256 is \(Self.emptySHA256), expected "
                                            + "\(expected); the bytes on disk were kept")))
                        }
                        // Otherwise the empty file takes the old one's place.
                        do throws(ResumableError) {
                            try self.switchFile(unswitched.reason, restoring: unswitched.before)
                        } catch {
                            return self.conclude(.failure(error))
                        }
                        self.events.send(unswitched.event)
                    }
                    return self.conclude(self.finish())
                }
            case .requestAgain:
                guard
                    limits.askingAgain(gained: gained, missing: missing, asked: asked, bodyEnded: bodyEnded)
                        == .askAgain
                else {
                    return .failure(limits.fruitlessError)
                }
                continue
            case .fail(let error):
                return .failure(error)
            case .retry(let error):
                guard case .retry(let attempt) = limits.retrying(gained: gained, missing: missing) else {
                    return .failure(error)
                }
                let delay = configuration.retry.delay(attempt: attempt, serverAsked: error.retryAfter)
                events.send(.retrying(attempt: attempt, delay: delay, error: error))
                try? await Task.sleep(for: delay)
            }
        }
    }

    /// The SHA-256 of no bytes.
    static let emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    private func stoppedError() -> ResumableError? {
        state.withLock { state in
            switch state.stop {
            case .pause(let message):
                return ResumableError(.paused, message)
            case .deadline(let limit):
                return ResumableError(.timedOut, "the download's deadline of \(limit) passed before it finished")
            case .discard:
                return ResumableError(.cancelled, "the download was cancelled")
            case nil:
                return Task.isCancelled ? ResumableError(.cancelled, "the download was cancelled") : nil
            }
        }
    }

    /// Starts a new, empty temporary file beside the current one and makes it the task's, in the order that
    /// keeps the token on disk true at every instant: create the new file, record a token naming it (offset
    /// 0), and only then remove the old file. When recording fails, the machine goes back to `before` (which
    /// describes the old file, still intact) and the error stops the download.
    ///
    /// With `unlessStopped`, a stop (a pause, the deadline) or a failed checkpoint that came while the token was
    /// recorded undoes the switch before the old file goes: the old file is flushed, the token of `before` recorded
    /// again, the new file removed, and `false` returned; the machine is left for the caller to restore. When that
    /// flush or that record fails, the old file stays the task's all the same, and the new one is kept as
    /// ``State/abandonedFile`` until the task's last token is recorded.
    @discardableResult
    func switchFile(
        _ reason: RestartReason, restoring before: ResumeStateMachine, unlessStopped: Bool = false
    ) throws(ResumableError) -> Bool {
        let old = state.withLock { $0.file }
        let new: PartialFile
        do {
            new = try PartialFile.create(in: (old.path as NSString).deletingLastPathComponent)
        } catch {
            state.withLock { $0.machine = before }
            throw error
        }
        let token = state.withLock { state in
            var switched = state.machine.state
            switched.tempPath = new.path
            return switched.token()
        }
        do {
            try checkpoints.record(token)
        } catch {
            new.remove()
            new.release()
            state.withLock { $0.machine = before }
            throw error
        }
        // A checkpoint that failed meanwhile stops the download as a stop does: the old bytes stay too.
        if unlessStopped, state.withLock({ $0.stop != nil }) || checkpoints.failure != nil {
            // The old file's bytes are flushed before its token goes back, as for any token.
            if (try? old.synchronize()) != nil, (try? checkpoints.record(before.state.token())) != nil {
                new.remove()
                new.release()
            } else {
                // The token on disk may name the new file: it stays until a token naming the old one is recorded.
                state.withLock { $0.abandonedFile = new }
            }
            return false
        }
        state.withLock { state in
            // The new file is hashed from its first byte.
            state.hasher?.cancel()
            if state.hasher != nil { state.hasher = PrefixHasher(file: new) }
            state.machine.switchedFile(to: new.path)
            state.file = new
            state.writebackStart = 0
            state.restarted = true
        }
        writebackQueue.sync {}
        old.remove()
        old.release()
        events.send(.restarted(reason: reason.description))
        return true
    }

    // MARK: - Finishing

    private func finish() -> Result<DownloadResult, ResumableError> {
        let (machine, file, transferred, restarted, hasher) = state.withLock {
            ($0.machine, $0.file, $0.progress.bytesTransferred, $0.restarted, $0.hasher)
        }
        let resume = machine.state
        do throws(ResumableError) {
            let size = try file.size()
            guard size == resume.offset else {
                throw ResumableError(
                    .fileSystem, "the temporary file '\(file.path)' holds \(size) bytes, expected \(resume.offset)")
            }
            // Never a file of another length than the representation's called finished (the state machine ends only
            // there; this holds whatever path led here).
            if let expected = resume.expectedLength, size != expected {
                throw ResumableError(
                    .protocolViolation, "the file holds \(size) bytes, but the server's file has \(expected)")
            }
            try file.synchronize()
            var digest: String?
            if let hasher {
                // Most of the file was hashed while it arrived; this waits for the rest.
                digest = try hasher.digest(length: size)
            } else if configuration.computesSHA256 || resume.expectedSHA256 != nil {
                digest = try file.sha256()
            }
            if let expected = resume.expectedSHA256, expected != digest {
                state.withLock { $0.stop = .discard }
                return .failure(
                    ResumableError(
                        .checksumMismatch,
                        "the downloaded file's SHA-256 is \(digest ?? "?"), expected \(expected); "
                            + "it was deleted"
                    )
                )
            }
            // The last token says the file is whole: a crash after the move below leaves a token that a
            // resume recognizes as finished, instead of downloading everything again.
            try checkpoints.record(resume.token())
            let finalPath = try finisher.moveIntoPlace(file, suggestedFilename: resume.suggestedFilename) {
                (name) throws(ResumableError) in
                // A free name: the last token says so before the move, or a crash right after it would look for the
                // file under the taken name and find someone else's.
                try checkpoints.record(resume.token(finalName: name))
            }
            let head = machine.finalHead
            return .success(
                DownloadResult(
                    fileURL: URL(fileURLWithPath: finalPath),
                    bytesOnDisk: size,
                    resumedAtOffset: restarted ? 0 : initialOffset,
                    restarted: restarted,
                    bytesTransferred: transferred,
                    status: machine.lastStatus ?? 200,
                    url: resume.url,
                    etag: resume.validators.etag,
                    lastModified: resume.validators.lastModified,
                    sha256: digest,
                    transport: configuration.transport,
                    responseHeaders: DownloadResult.headerDictionary(head?.headers ?? []),
                    mimeType: head?.value("Content-Type").flatMap(DownloadResult.mimeType)
                )
            )
        } catch {
            return .failure(error)
        }
    }
}
