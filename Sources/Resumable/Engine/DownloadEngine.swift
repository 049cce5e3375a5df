import Foundation
import Synchronization

/// Performs what ``ResumeStateMachine`` decides: sends requests through a transport, writes accepted
/// bodies into the ``PartialFile``, retries transient failures, and moves the finished file into place.
final class DownloadEngine: Sendable {
    /// Why the engine was asked to stop.
    enum StopMode: Sendable {
        /// Keep the temporary file: a token will be produced.
        case pause
        /// Delete the temporary file.
        case discard
    }

    private struct State {
        var machine: ResumeStateMachine
        var stop: StopMode?
        var headOutcome: ResumeStateMachine.Outcome?
        var bytesTransferred: Int64 = 0
        var transferStart: Int64 = 0
        var lastProgressAt: ContinuousClock.Instant
        var rateSampleAt: ContinuousClock.Instant
        var rateSampleBytes: Int64 = 0
        var bytesPerSecond: Double = 0
        var lastCheckpointAt: ContinuousClock.Instant
        var checkpointInFlight = false
        /// Where the next early writeback starts.
        var writebackStart: Int64 = 0
        /// Set when the run loop ended: late transport callbacks and checkpoints are refused.
        var ended = false
    }

    let file: PartialFile
    let destination: DownloadTask.Destination
    let configuration: DownloadTask.Configuration
    let createdAt: Date
    /// The offset this task started at (the token's, reconciled with the file).
    let initialOffset: Int64
    let events: EventHub
    /// How many written bytes trigger an early writeback, so the final flush has little left to do.
    static let writebackChunk: Int64 = 8 << 20
    private let checkpointQueue = DispatchQueue(label: "Resumable.checkpoints")
    private let state: Mutex<State>

    init(
        machine: ResumeStateMachine,
        file: PartialFile,
        destination: DownloadTask.Destination,
        configuration: DownloadTask.Configuration,
        createdAt: Date
    ) {
        let now = ContinuousClock.now
        self.state = Mutex(State(machine: machine, lastProgressAt: now, rateSampleAt: now, lastCheckpointAt: now))
        self.events = EventHub(handler: configuration.eventHandler)
        self.file = file
        self.destination = destination
        self.configuration = configuration
        self.createdAt = createdAt
        self.initialOffset = machine.offset
    }

    /// Asks the run loop to stop; the caller cancels the task running ``run()``.
    func requestStop(_ mode: StopMode) {
        state.withLock { state in
            if state.stop == nil { state.stop = mode }
        }
    }

    /// A token for the bytes safely in the temporary file, or `nil` when nothing can be resumed.
    func makeToken() -> ResumeToken? {
        state.withLock { token(for: $0.machine) }
    }

    /// A token for the current state; with `allowingEmpty`, also at offset 0 (for checkpoints: a hand-off
    /// before the first byte is still a hand-off).
    private func token(for machine: ResumeStateMachine, allowingEmpty: Bool = false) -> ResumeToken? {
        guard machine.offset > 0 || allowingEmpty, machine.isResumable else { return nil }
        return ResumeToken(
            url: machine.url,
            originalURL: machine.originalURL,
            offset: machine.offset,
            expectedLength: machine.expectedLength,
            etag: machine.validators.etag,
            lastModified: machine.validators.lastModified,
            responseDate: machine.validators.responseDate,
            acceptRanges: machine.acceptRanges,
            tempPath: file.path,
            suggestedFilename: machine.suggestedFilename,
            destination: destination.tokenValue,
            headers: configuration.headers,
            createdAt: createdAt,
            updatedAt: Date()
        )
    }

    // MARK: - The run loop

    /// Downloads until the file is complete, a permanent failure, the retries run out, or a stop.
    ///
    /// On failure the temporary file is kept and the error carries a token when there is something to
    /// resume; otherwise the temporary file is removed.
    func run() async -> Result<DownloadResult, ResumableError> {
        let result = await loop()
        switch result {
        case .success(let downloaded):
            events.send(.finished(downloaded))
        case .failure:
            // Keep the bytes when a token can resume them; otherwise nothing is worth keeping.
            let discard = state.withLock { $0.stop == .discard }
            if !discard, makeToken() != nil {
                try? file.synchronize()
            } else {
                file.remove()
            }
        }
        // No checkpoint may flush or report after the task ended, nor after the file is released.
        state.withLock { $0.ended = true }
        drainCheckpoints()
        if case .success = result { configuration.checkpointing?.finished?() }
        // Another task or process may take the file over from here on.
        file.release()
        events.finish()
        return result
    }

    private func loop() async -> Result<DownloadResult, ResumableError> {
        var failuresInARow = 0
        while true {
            if let stopped = stoppedError() { return .failure(stopped) }
            let request = state.withLock { state in
                state.headOutcome = nil
                return state.machine.nextRequest()
            }
            do {
                try file.truncate(to: request.offset)
            } catch {
                return .failure(failed(error))
            }
            var transportError: ResumableError?
            do {
                let transportRequest = TransportRequest(
                    url: request.url,
                    headers: request.headers,
                    idleTimeout: configuration.idleTimeout
                )
                try await configuration.transport.execute(transportRequest, consumer: Consumer(engine: self))
            } catch {
                transportError = error
            }
            if let stopped = stoppedError() { return .failure(stopped) }
            // Progress is throttled while bytes arrive; report where this response left the file.
            emitProgress()
            let (outcome, progressed, restart) = state.withLock { state in
                let outcome: ResumeStateMachine.Outcome
                if let decided = state.headOutcome {
                    outcome = decided
                } else {
                    outcome = state.machine.responseEnded(error: transportError)
                }
                let restart = state.machine.lastRestart
                return (outcome, state.machine.offset > request.offset, restart)
            }
            switch outcome {
            case .finished:
                return finish()
            case .requestAgain:
                if let restart, state.withLock({ $0.machine.offset }) == 0, request.offset > 0 {
                    events.send(.restarted(reason: restart.description))
                }
                continue
            case .fail(let error):
                return .failure(failed(error))
            case .retry(let error):
                failuresInARow = progressed ? 1 : failuresInARow + 1
                guard failuresInARow <= configuration.retry.maximumRetries else {
                    return .failure(failed(error))
                }
                state.withLock { state in
                    if !state.machine.isResumable { state.machine.discardProgress() }
                }
                let delay = configuration.retry.delay(attempt: failuresInARow, serverAsked: error.retryAfter)
                events.send(.retrying(attempt: failuresInARow, delay: delay, error: error))
                try? await Task.sleep(for: delay)
            }
        }
    }

    private func stoppedError() -> ResumableError? {
        state.withLock { state in
            guard state.stop != nil || Task.isCancelled else { return nil }
            return ResumableError(.cancelled, "the download was cancelled")
        }
    }

    /// Attaches a token to a failure when there is something to resume.
    private func failed(_ error: ResumableError) -> ResumableError {
        var error = error
        error.resumeToken = makeToken()
        return error
    }

    // MARK: - Finishing

    private func finish() -> Result<DownloadResult, ResumableError> {
        let machine = state.withLock { $0.machine }
        let transferred = state.withLock { $0.bytesTransferred }
        do throws(ResumableError) {
            let size = try file.size()
            guard size == machine.offset else {
                throw ResumableError(
                    .fileSystem,
                    "the temporary file '\(file.path)' holds \(size) bytes, expected \(machine.offset)"
                )
            }
            try file.synchronize()
            var digest: String?
            if configuration.computesSHA256 || configuration.expectedSHA256 != nil {
                digest = try file.sha256()
            }
            if let expected = configuration.expectedSHA256, expected.lowercased() != digest {
                state.withLock { $0.stop = .discard }
                return .failure(
                    ResumableError(
                        .checksumMismatch,
                        "the downloaded file's SHA-256 is \(digest ?? "?"), expected \(expected.lowercased()); "
                            + "it was deleted"
                    )
                )
            }
            let finalPath = try moveIntoPlace(suggestedFilename: machine.suggestedFilename)
            return .success(
                DownloadResult(
                    fileURL: URL(fileURLWithPath: finalPath),
                    bytesOnDisk: size,
                    resumedAtOffset: initialOffset,
                    bytesTransferred: transferred,
                    status: machine.lastStatus ?? 200,
                    url: machine.url,
                    etag: machine.validators.etag,
                    lastModified: machine.validators.lastModified,
                    sha256: digest,
                    transport: configuration.transport
                )
            )
        } catch {
            var error = error
            error.resumeToken = token(for: machine)
            return .failure(error)
        }
    }

    private func moveIntoPlace(suggestedFilename: String) throws(ResumableError) -> String {
        let directory = destination.directoryPath
        let wanted: String
        switch destination.kind {
        case .directory(let path): wanted = (path as NSString).appendingPathComponent(suggestedFilename)
        case .file(let path): wanted = path
        }
        switch configuration.existingFile {
        case .overwrite:
            try file.move(to: wanted, replacing: true)
            return wanted
        case .fail:
            do {
                try file.move(to: wanted, replacing: false)
            } catch  where FileManager.default.fileExists(atPath: wanted) {
                throw ResumableError(.destinationExists, "'\(wanted)' already exists")
            }
            return wanted
        case .chooseFreeName:
            let name = (wanted as NSString).lastPathComponent
            for _ in 0..<100 {
                let free = SuggestedFilename.available(name) { candidate in
                    FileManager.default.fileExists(atPath: (directory as NSString).appendingPathComponent(candidate))
                }
                let path = (directory as NSString).appendingPathComponent(free)
                do {
                    try file.move(to: path, replacing: false)
                    return path
                } catch  where FileManager.default.fileExists(atPath: path) {
                    continue  // Taken between the check and the link: try the next free name.
                }
            }
            throw ResumableError(.destinationExists, "no free name for '\(wanted)'")
        }
    }

    // MARK: - Receiving

    /// Feeds responses from the transport into the state machine and the file.
    private struct Consumer: ResponseConsumer {
        let engine: DownloadEngine

        func receive(_ head: ResponseHead) -> Bool {
            engine.receive(head)
        }

        func receive(_ body: UnsafeRawBufferPointer) throws(ResumableError) {
            try engine.receive(body)
        }
    }

    private func receive(_ head: ResponseHead) -> Bool {
        let result = state.withLock { (state) -> Result<DownloadEvent?, ResumableError>? in
            guard state.stop == nil, !state.ended else { return nil }
            switch state.machine.receive(head) {
            case .skipBody(let outcome):
                state.headOutcome = outcome
                return nil
            case .writeBody(let resumedAt, let restarted):
                do throws(ResumableError) {
                    if restarted != nil || resumedAt == 0 {
                        try file.truncate(to: 0)
                    }
                } catch {
                    state.headOutcome = .fail(error)
                    return .failure(error)
                }
                state.transferStart = resumedAt
                let expected = state.machine.expectedLength
                if let restarted {
                    return .success(.restarted(reason: restarted.description))
                }
                return .success(
                    resumedAt > 0
                        ? .resumed(atOffset: resumedAt, expectedLength: expected)
                        : .started(atOffset: 0, expectedLength: expected)
                )
            }
        }
        guard case .success(let event) = result else { return false }
        if let event {
            events.send(event)
            if case .restarted = event {
                events.send(.started(atOffset: 0, expectedLength: state.withLock { $0.machine.expectedLength }))
            }
        }
        emitProgress()
        if configuration.checkpointing != nil {
            let token = state.withLock { state in
                state.checkpointInFlight = true
                state.lastCheckpointAt = .now
                return self.token(for: state.machine, allowingEmpty: true)
            }
            takeCheckpoint(token)
        }
        return true
    }

    private func receive(_ body: UnsafeRawBufferPointer) throws(ResumableError) {
        let count = body.count
        let (emit, checkpoint) = try state.withLock { (state) throws(ResumableError) -> (Bool, Bool) in
            guard state.stop == nil, !state.ended else {
                throw ResumableError(.cancelled, "the download was cancelled")
            }
            let position = state.machine.offset
            try state.machine.receiveBody(count: count)
            do throws(ResumableError) {
                try file.write(body, at: position)
            } catch {
                state.machine.revertBody(to: position)
                throw error
            }
            state.bytesTransferred += Int64(count)
            if state.machine.offset < state.writebackStart {
                state.writebackStart = 0  // The file restarted.
            }
            if state.machine.offset - state.writebackStart >= Self.writebackChunk {
                let range = (state.writebackStart, state.machine.offset - state.writebackStart)
                state.writebackStart = state.machine.offset
                checkpointQueue.async { [file] in file.startWriteback(offset: range.0, count: range.1) }
            }
            let now = ContinuousClock.now
            let emit = now - state.lastProgressAt >= configuration.progressInterval
            var checkpoint = false
            if let checkpointing = configuration.checkpointing, !state.checkpointInFlight,
                now - state.lastCheckpointAt >= checkpointing.interval
            {
                state.checkpointInFlight = true
                state.lastCheckpointAt = now
                checkpoint = true
            }
            return (emit, checkpoint)
        }
        if emit { emitProgress() }
        if checkpoint { takeCheckpoint(makeToken()) }
        if let rate = configuration.simulatedWriterBytesPerSecond, rate > 0 {
            usleep(useconds_t(min(Double(count) / Double(rate) * 1e6, 1e6)))
        }
    }

    private func emitProgress() {
        let progress: DownloadProgress = state.withLock { state in
            let now = ContinuousClock.now
            state.lastProgressAt = now
            let elapsed = now - state.rateSampleAt
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            if seconds >= 0.05 {
                let instant = Double(state.bytesTransferred - state.rateSampleBytes) / seconds
                state.bytesPerSecond =
                    state.bytesPerSecond == 0 ? instant : 0.7 * state.bytesPerSecond + 0.3 * instant
                state.rateSampleAt = now
                state.rateSampleBytes = state.bytesTransferred
            }
            return DownloadProgress(
                bytesOnDisk: state.machine.offset,
                expectedLength: state.machine.expectedLength,
                resumedAtOffset: state.transferStart,
                bytesTransferred: state.bytesTransferred,
                bytesPerSecond: state.bytesPerSecond
            )
        }
        events.send(.progress(progress))
    }

    /// Flushes the temporary file off the write path, then hands a token covering the flushed bytes to the
    /// checkpoint handler.
    private func takeCheckpoint(_ token: ResumeToken?) {
        guard let checkpointing = configuration.checkpointing else { return }
        // A serial queue off the write path: checkpoints reach the handler in order, never overlapping.
        checkpointQueue.async { [self] in
            defer { state.withLock { $0.checkpointInFlight = false } }
            guard let token, !state.withLock({ $0.ended }) else { return }
            // Every byte up to the token's offset was written before this flush began.
            guard (try? file.synchronize()) != nil else { return }
            checkpointing.handler(token)
        }
    }

    /// Waits until every scheduled checkpoint was handed to the handler.
    func drainCheckpoints() {
        checkpointQueue.sync {}
    }
}
