import Foundation
import Resumable

/// Runs one download (`get`) or resume (`resume`) to its end.
///
/// It wires the library to the terminal: progress and events to the ``ProgressRenderer``, checkpoints to the
/// ``TokenFile``, SIGINT/SIGTERM to ``DownloadTask/cancelProducingResumeData()``; then it reports the outcome
/// and chooses the exit status. Everything HTTP is the library's.
struct DownloadRunner {
    /// The `get`/`resume` options.
    let options: DownloadOptions
    /// Where the token goes.
    let tokenFile: TokenFile
    /// Where progress goes.
    let renderer: ProgressRenderer

    private enum Outcome: Sendable {
        case ended(Result<DownloadResult, ResumableError>)
        case signal(Int32)
        case interrupted(Int32, ResumeToken?)
        case watcherGone
    }

    /// Starts the task with `start` and runs it to completion, failure or a signal.
    func run(
        start: (DownloadTask.Configuration) throws(ResumableError) -> DownloadTask
    ) async -> ExitCode {
        let watcher = SignalWatcher()
        let task: DownloadTask
        do {
            task = try start(options.configuration(checkpointing: checkpointing()))
        } catch {
            // Nothing was touched: the token file (if any) stays as it was.
            return reportFailure(error, leftToken: nil)
        }
        let renderer = self.renderer
        // Subscribe now, not inside the task: a small file can be complete before a new task first runs.
        // Even so the library may have sent early events before this subscription (see cli-requests.md), so
        // `finished` is reported from the task's result below, not from the stream.
        let stream = task.events
        let events = Task {
            for await event in stream {
                if case .finished = event { continue }
                renderer.handle(event)
            }
        }
        let outcome = await race(task, against: watcher)
        withExtendedLifetime(watcher) {}
        await events.value
        renderer.finish()

        switch outcome {
        case .ended(.success(let result)):
            tokenFile.endCompleted()
            renderer.handle(.finished(result))
            return reportSuccess(result)
        case .ended(.failure(let error)):
            return reportFailure(error, leftToken: written(tokenFile.end(leaving: error.resumeToken)))
        case .interrupted(let signal, let token):
            return reportInterruption(signal, leftToken: written(tokenFile.end(leaving: token)))
        case .signal, .watcherGone:
            return .failure  // Not produced by `race`.
        }
    }

    private func checkpointing() -> DownloadTask.Checkpointing {
        let tokenFile = self.tokenFile
        let renderer = self.renderer
        var checkpointing = DownloadTask.Checkpointing(interval: .seconds(1)) { token throws(ResumableError) in
            switch tokenFile.checkpoint(token) {
            case .success(let url):
                renderer.emit(EventJSON.checkpoint(token, at: url))
                var warnings: [String] = []
                if let earlier = tokenFile.takeReplacedToken() {
                    warnings.append(
                        "replaced the resume token of an earlier unfinished download at \(url.path); "
                            + "its partial file (\(earlier.offset) bytes) is left at \(earlier.tempPath)")
                }
                if let earlier = tokenFile.takeTokenKeptBeside() {
                    warnings.append(
                        "an earlier unfinished download of '\(earlier.suggestedFilename)' "
                            + "(\(earlier.url.absoluteString), \(earlier.offset) bytes) keeps its resume token; "
                            + "this download's is at \(url.path)")
                }
                for message in warnings {
                    renderer.emit(EventJSON.warning(message))
                    renderer.note("warning: " + message)
                }
            case .failure(let error):
                // The library stops the download: it never continues without a token on disk.
                throw error
            case nil:
                break
            }
        }
        checkpointing.abandoned = { tempPath in tokenFile.abandon(tempPath: tempPath) }
        return checkpointing
    }

    /// Waits for the task to end or a signal; on a signal, pauses the task into a token.
    private func race(_ task: DownloadTask, against watcher: SignalWatcher) async -> Outcome {
        let renderer = self.renderer
        return await withTaskGroup(of: Outcome.self) { group in
            group.addTask { .ended(await task.result) }
            let signals = watcher.signals
            group.addTask {
                for await signal in signals { return .signal(signal) }
                return .watcherGone
            }
            guard let first = await group.next() else { return .watcherGone }
            guard case .signal(let signal) = first else {
                group.cancelAll()
                return first
            }
            renderer.emit(EventJSON.paused(signal))
            let token = await task.cancelProducingResumeData()
            while let next = await group.next() {
                // The download may have completed in the same instant: then the file is there, report that.
                if case .ended(.success) = next { return next }
            }
            return .interrupted(signal, token)
        }
    }

    private func written(_ left: (written: Result<URL, ResumableError>, token: ResumeToken)?) -> LeftToken? {
        guard let (result, token) = left else { return nil }
        switch result {
        case .success(let url):
            return LeftToken(url: url, token: token)
        case .failure(let error):
            // Losing the token would orphan the partial file: show it so that it can be saved by hand.
            let url = tokenFile.url ?? TokenFile.defaultURL(for: token)
            Console.err("error: cannot write the resume token to \(url.path): \(error.message)")
            Console.err(String(decoding: token.jsonData(), as: UTF8.self))
            return nil
        }
    }

    // MARK: - Reports

    private func reportSuccess(_ result: DownloadResult) -> ExitCode {
        if options.outputMode.isJSON {
            Console.out(EventJSON.completed(result).serialized)
            return .success
        }
        var summary = "Saved \(result.fileURL.path) (\(ByteFormat.size(result.bytesOnDisk))"
        if result.resumedAtOffset > 0 {
            summary += "; resumed at byte \(result.resumedAtOffset), "
            summary += "\(ByteFormat.size(result.bytesTransferred)) transferred"
        }
        summary += ")"
        renderer.note(summary)
        if let sha256 = result.sha256, options.sha256 != nil {
            renderer.note("SHA-256 verified: \(sha256)")
        }
        Console.out(result.fileURL.path)
        return .success
    }

    /// Reports a failure and returns its exit status; `leftToken` is the token left on disk, if any.
    func reportFailure(_ error: ResumableError, leftToken: LeftToken?) -> ExitCode {
        let code = ExitCode.forError(error)
        renderer.emit(EventJSON.failedEvent(error))
        if options.outputMode.isJSON {
            Console.out(EventJSON.failed(error, token: leftToken.map { ($0.url, $0.token) }, exitCode: code).serialized)
            return code
        }
        Console.err("error: \(error.message)")
        if let leftToken {
            hint(leftToken, reason: "The partial download was kept")
        }
        return code
    }

    private func reportInterruption(_ signal: Int32, leftToken: LeftToken?) -> ExitCode {
        let code = ExitCode.forSignal(signal)
        if options.outputMode.isJSON {
            Console.out(
                EventJSON.interrupted(signal, token: leftToken.map { ($0.url, $0.token) }, exitCode: code).serialized
            )
            return code
        }
        if let leftToken {
            hint(leftToken, reason: "Interrupted by \(SignalWatcher.name(of: signal))")
        } else {
            Console.err(
                "Interrupted by \(SignalWatcher.name(of: signal)) before any data was saved; nothing to resume.")
        }
        return code
    }

    private func hint(_ left: LeftToken, reason: String) {
        var position = "at byte \(left.token.offset)"
        if let total = left.token.expectedLength {
            position += " of \(total) (\(ByteFormat.precisePercent(left.token.offset, of: total)))"
        }
        Console.err("\(reason) \(position). Resume token: \(left.url.path)")
        Console.err("To continue, run:\n  resumable resume \(ByteFormat.shellQuoted(left.url.path))")
    }
}

/// A resume token that was written to disk at the end of a run.
struct LeftToken {
    /// Where it was written.
    let url: URL
    /// The token.
    let token: ResumeToken
}
