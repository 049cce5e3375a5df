import Foundation
import Synchronization

/// The only path by which a task's tokens reach the caller's checkpoint handler, and so the disk.
///
/// Everything runs on one serial queue, in order, so a later token never lands before an earlier one:
/// - ``schedule(_:file:)``, while data arrives: flushes the temporary file (every byte up to the token's
///   offset was written before the flush began), then hands the token over. A token for a file that is no
///   longer the task's (a restart switched files meanwhile) is dropped.
/// - ``record(_:)``: hands a token over now and waits; used where the order of steps on disk matters (the
///   switch to a new temporary file, the last token before the file is moved into place). It throws when the
///   handler does, and the caller stops: a download never continues unrecorded.
///
/// A failure of a scheduled checkpoint is kept and reported by ``failure``; the engine checks it with every
/// piece of body and stops the transfer.
final class CheckpointWriter: Sendable {
    private struct State {
        /// The temporary file tokens may name.
        var currentPath: String
        var inFlight = false
        var lastScheduledAt: ContinuousClock.Instant
        var failure: ResumableError?
        var ended = false
    }

    private let checkpointing: DownloadTask.Checkpointing?
    private let queue = DispatchQueue(label: "Resumable.checkpoints")
    private let state: Mutex<State>

    init(checkpointing: DownloadTask.Checkpointing?, path: String) {
        self.checkpointing = checkpointing
        self.state = Mutex(State(currentPath: path, lastScheduledAt: .now))
    }

    /// Whether a handler receives tokens.
    var isEnabled: Bool { checkpointing != nil }

    /// The first failure of a scheduled checkpoint, if any.
    var failure: ResumableError? {
        state.withLock { $0.failure }
    }

    /// Whether a periodic checkpoint is due now; if so it is marked in flight, and the caller schedules it.
    func claimPeriodic(now: ContinuousClock.Instant = .now) -> Bool {
        guard let checkpointing else { return false }
        return state.withLock { state in
            guard !state.inFlight, !state.ended, now - state.lastScheduledAt >= checkpointing.interval else {
                return false
            }
            state.inFlight = true
            state.lastScheduledAt = now
            return true
        }
    }

    /// Flushes `file` off the caller's thread, then hands `token` to the handler.
    func schedule(_ token: ResumeToken, file: PartialFile) {
        guard let checkpointing else { return }
        // A token that covers no byte, which the handler's owner keeps in memory: taken here, without a flush or a
        // hop to the queue. Only while no checkpoint is in flight, so it never overtakes an earlier token.
        if token.coversNoByte, let keepsInMemory = checkpointing.keepsInMemory {
            let taken = state.withLock { state -> Bool in
                guard !state.inFlight else { return false }
                state.lastScheduledAt = .now
                // Dropped, as the queue would drop it.
                guard !state.ended, state.failure == nil, state.currentPath == token.tempPath else { return true }
                return keepsInMemory(token)
            }
            if taken { return }
        }
        state.withLock {
            $0.inFlight = true
            $0.lastScheduledAt = .now
        }
        queue.async { [self] in
            defer { state.withLock { $0.inFlight = false } }
            let current = state.withLock { !$0.ended && $0.failure == nil && $0.currentPath == token.tempPath }
            guard current else { return }
            do throws(ResumableError) {
                // A token that covers no byte (the one handed over when a response is accepted) needs no flush.
                if !token.coversNoByte { try file.synchronize() }
                try Self.call(checkpointing.handler, token)
            } catch {
                state.withLock { $0.failure = $0.failure ?? error }
            }
        }
    }

    /// Hands `token` to the handler now, after every scheduled checkpoint; from then on only tokens naming
    /// its temporary file are written. The bytes the token covers must already be flushed.
    func record(_ token: ResumeToken) throws(ResumableError) {
        guard let checkpointing else {
            state.withLock { $0.currentPath = token.tempPath }
            return
        }
        let result: Result<Void, ResumableError> = queue.sync {
            state.withLock { $0.currentPath = token.tempPath }
            return Result { () throws(ResumableError) in try Self.call(checkpointing.handler, token) }
        }
        try result.get()
    }

    /// No checkpoint is written after this returns.
    func end() {
        state.withLock { $0.ended = true }
        queue.sync {}
    }

    private static func call(
        _ handler: @Sendable (ResumeToken) throws -> Void, _ token: ResumeToken
    ) throws(ResumableError) {
        do {
            try handler(token)
        } catch let error as ResumableError {
            throw ResumableError(
                error.code, "cannot write the resume token: \(error.message)", underlying: error.underlying)
        } catch {
            throw ResumableError(.fileSystem, "cannot write the resume token: \(error)")
        }
    }
}
