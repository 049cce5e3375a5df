import Foundation
import Resumable
import Synchronization

/// Runs a batch (`get -i LIST`, `resume --state DIR`) through the library's ``DownloadQueue`` and its
/// ``TaskStore``: progress to the terminal, SIGINT/SIGTERM to ``DownloadQueue/pauseAll()``, then a summary and the
/// exit status. Which download runs when, and what survives a crash, is the library's.
struct BatchRunner {
    let options: DownloadOptions
    let jobs: Int
    let store: TaskStore

    /// How many entries of a list are added to the queue at once.
    static let additionGroup = 32

    /// The state directory of a batch whose output directory is `output`, when `--state` is not given.
    static func defaultStateDirectory(output: String) -> URL {
        URL(fileURLWithPath: output, isDirectory: true).appendingPathComponent(".resumable-state", isDirectory: true)
    }

    /// Downloads `entries` into `directory`.
    ///
    /// The whole list is added to a suspended queue between the store's `adding` mark and its removal, and only then
    /// do downloads start: after a crash in between, the store holds records of part of the list and no byte of
    /// any, and the same command drops them and starts again, while `resume --state` refuses (it would call a
    /// batch complete with entries of the list never added).
    func runList(_ entries: [InputList.Entry], into directory: URL) async -> ExitCode {
        guard let interrupted = additionWasInterrupted() else { return .dataError }
        guard interrupted || store.pendingRecordCount() == 0 else {
            Console.err(
                "error: the state directory \(store.directory.path) holds unfinished downloads of an earlier batch; "
                    + "continue them with 'resumable resume --state \(store.directory.path)', or choose another --state"
            )
            return .usage
        }
        return await run(total: entries.count) { queue, display in
            await queue.suspend()
            if interrupted {
                // Records of a list whose addition a crash cut short; none of them ever started. One that holds a
                // byte contradicts that, and so may one that cannot be read: nothing is dropped then.
                let problems = await queue.restore()
                if !problems.isEmpty {
                    for problem in problems {
                        Console.err("error: \(problem.file.path): \(problem.error.message)")
                    }
                    Console.err(
                        "error: the state directory \(store.directory.path) is marked as holding an unfinished list "
                            + "addition, but some of its records cannot be read: nothing was dropped or downloaded")
                    return .stop(.dataError)
                }
                let items = await queue.items
                let started = items.contains { item in
                    guard case .waiting = item.state else { return true }
                    return item.bytesOnDisk > 0
                }
                if started {
                    Console.err(
                        "error: the state directory \(store.directory.path) is marked as holding an unfinished list "
                            + "addition, but some of its downloads have started; continue them with "
                            + "'resumable resume --state' after removing \(store.directory.path)/adding")
                    return .stop(.dataError)
                }
                for item in items { await queue.cancel(item.id) }
            } else {
                do throws(ResumableError) {
                    try store.beginAddition()
                } catch {
                    Console.err("error: \(error.message)")
                    return .stop(ExitCode.forError(error))
                }
            }
            var start = 0
            while start < entries.count {
                let group = entries[start..<min(start + Self.additionGroup, entries.count)]
                start = group.endIndex
                let (added, failure) = await queue.add(
                    contentsOf: group.map { entry in
                        DownloadQueue.Addition(
                            entry.url,
                            destination: entry.outputName.map {
                                .file(directory.appendingPathComponent($0, isDirectory: false))
                            } ?? .directory(directory),
                            expectedSHA256: entry.sha256 ?? options.sha256)
                    })
                for (entry, id) in zip(group, added) {
                    if let name = entry.outputName { await display.name(id, as: name) }
                }
                if let failure {
                    Console.err("error: line \(group[group.startIndex + added.count].line): \(failure.message)")
                    return .stop(ExitCode.forError(failure))
                }
            }
            do throws(ResumableError) {
                try store.endAddition()
            } catch {
                // Nothing starts: the store still says the list is being added, and the same command starts over.
                Console.err("error: \(error.message)")
                return .stop(ExitCode.forError(error))
            }
            await queue.unsuspend()
            return .run(skipped: 0)
        }
    }

    /// Whether the store's list addition was cut short (``TaskStore/additionWasInterrupted()``); `nil`, said on
    /// standard error, when the store's mark is not one `get -i` left.
    private func additionWasInterrupted() -> Bool? {
        do throws(ResumableError) {
            return try store.additionWasInterrupted()
        } catch {
            Console.err("error: \(error.message)")
            return nil
        }
    }

    /// Continues every unfinished download of the store.
    func runStore() async -> ExitCode {
        guard let interrupted = additionWasInterrupted() else { return .dataError }
        if interrupted {
            Console.err(
                "error: the batch in \(store.directory.path) was interrupted while its list was being added, before "
                    + "any download started: run 'resumable get -i LIST --state \(store.directory.path)' again (with the list corrected if a line of it was refused)"
            )
            return .dataError
        }
        return await run(total: store.pendingRecordCount()) { queue, display in
            let problems = await queue.restore()
            // A download saved to a file of its own (`out=`) is shown under that file's name.
            for item in await queue.items where !item.destination.tokenValue.hasSuffix("/") {
                await display.name(item.id, as: (item.destination.tokenValue as NSString).lastPathComponent)
            }
            for problem in problems {
                Console.err("warning: skipping \(problem.file.path): \(problem.error.message)")
            }
            await queue.resumeAll()
            return .run(skipped: problems.count)
        }
    }

    /// What a batch's preparation decided.
    private enum Preparation {
        /// End the batch at once with this status.
        case stop(ExitCode)
        /// Run the queue; `skipped` records of the store could not be used and stay in it, so the batch is not
        /// complete whatever happens to the others (exit 65, reported in the summary).
        case run(skipped: Int)
    }

    /// Subscribes to the queue's events, lets `prepare` fill it (``Preparation/stop(_:)`` ends the batch at once:
    /// every download added so far is paused into the store), then waits for the queue to be idle or for a signal.
    private func run(total: Int, prepare: (DownloadQueue, BatchDisplay) async -> Preparation) async -> ExitCode {
        var download = options.configuration(checkpointing: .init(interval: .seconds(1)) { _ in })
        // A --sha256 applies to every file of the list through `add`; per-file checksums come from the list.
        download.expectedSHA256 = nil
        var configuration = DownloadQueue.Configuration(maximumConcurrentDownloads: jobs, download: download)
        // A download that fails for good stays in the store until the summary below reports it: a crash before that
        // leaves it there, and the next `resume --state` tries it again instead of calling the batch complete.
        configuration.keepsFailuresForGood = true
        let queue = DownloadQueue(configuration: configuration, store: store)
        let watcher = SignalWatcher()
        let display = BatchDisplay(mode: options.outputMode, total: total)
        // `-q` shows nothing while running: no subscription, so no event travels to the display.
        let events = options.outputMode == .silent ? nil : await queue.events()
        let reporter = Task {
            guard let events else { return }
            for await event in events { await display.handle(event) }
        }
        // A redraw the throttle held back is drawn once its interval passed, even when no event follows (every
        // download waiting on its server): otherwise the block showed the state of the last event drawn.
        let ticker = Task {
            while options.outputMode == .terminal && !Task.isCancelled {
                try? await Task.sleep(for: RedrawThrottle.terminalInterval)
                await display.drawPending()
            }
        }
        defer { ticker.cancel() }
        let skipped: Int
        switch await prepare(queue, display) {
        case .run(let count):
            skipped = count
        case .stop(let early):
            await queue.suspend()
            _ = await queue.waitUntilIdle()
            await queue.finishEvents()
            await reporter.value
            await display.finish()
            return early
        }
        let signal: Int32? = await withTaskGroup(of: Int32?.self) { group in
            group.addTask {
                _ = await queue.waitUntilIdle()
                return nil
            }
            let signals = watcher.signals
            group.addTask {
                for await signal in signals { return signal }
                return nil
            }
            let first = await group.next() ?? nil
            if first != nil {
                await queue.suspend()
                _ = await queue.waitUntilIdle()
            }
            group.cancelAll()
            return first
        }
        withExtendedLifetime(watcher) {}
        let summary = await queue.waitUntilIdle()
        let items = await queue.items
        // Failed for good (nothing on disk to resume). When everything else is done, the batch is over: they are
        // reported as failed and then leave the store (a crash before that leaves them, failed, for the next run).
        // Otherwise (a signal, downloads left to resume) they stay, and the run that continues the batch asks for them
        // again: it must not call the batch complete without them.
        let failedForGood = Set(await queue.failuresForGood)
        let others = items.filter { !failedForGood.contains($0.id) }
        let batchIsOver = signal == nil && others.isEmpty
        // Every event sent until now reaches the display (a cancel dropped the last ones still buffered, such as the
        // last download's `task-finished`), then the stream ends.
        await queue.finishEvents()
        await reporter.value
        await display.finish()
        let exit = report(summary, left: batchIsOver ? others : items, skipped: skipped, signal: signal)
        if batchIsOver {
            for id in failedForGood { await queue.cancel(id) }
        }
        return exit
    }

    /// Prints the summary and returns the exit status; `skipped` records of the store could not be used.
    private func report(
        _ summary: DownloadQueue.Summary, left: [DownloadQueue.Item], skipped: Int, signal: Int32?
    ) -> ExitCode {
        let failed = left.compactMap { item -> (DownloadQueue.Item, ResumableError)? in
            if case .failed(let error) = item.state { return (item, error) }
            return nil
        }
        let exit: ExitCode
        if let signal {
            exit = ExitCode.forSignal(signal)
        } else if skipped > 0 {
            // Records the store holds and nothing could continue: a bad store, whatever the others did.
            exit = .dataError
        } else if summary.failed == 0 && left.isEmpty {
            exit = .success
        } else if failed.count == left.count && failed.allSatisfy({ ExitCode.forError($0.1) == .temporaryFailure })
            && summary.failed == failed.count
        {
            // Every failure can be resumed later: try again.
            exit = .temporaryFailure
        } else {
            exit = .failure
        }
        let text =
            "\(summary.finished) finished, \(summary.failed) failed, \(left.count) left to resume"
            + (skipped == 0 ? "" : ", \(skipped) record\(skipped == 1 ? "" : "s") unreadable")
            + (left.isEmpty ? "" : " (resumable resume --state \(store.directory.path))")
        if options.outputMode.isJSON {
            let object: JSONValue = .object([
                ("status", .string(exit == .success ? "completed" : signal != nil ? "interrupted" : "failed")),
                ("finished", .int(Int64(summary.finished))),
                ("failed", .int(Int64(summary.failed))),
                ("left", .int(Int64(left.count))),
                ("skipped", .int(Int64(skipped))),
                ("state", .string(store.directory.path)),
                ("exitCode", .int(Int64(exit.rawValue))),
            ])
            Console.out(object.serialized)
        } else if options.outputMode != .silent || exit != .success {
            Console.err(text)
        }
        return exit
    }
}

extension TaskStore {
    /// How many records the store holds, without restoring them.
    fileprivate func pendingRecordCount() -> Int {
        let tasks = directory.appendingPathComponent("tasks").path
        return ((try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? []).filter { $0.hasSuffix(".json") }
            .count
    }
}

/// Shows a batch's progress: the multi-line block on a terminal, event lines otherwise, JSON lines with `--json`.
actor BatchDisplay {
    private let mode: OutputMode
    private var total: Int
    private var names: [DownloadQueue.TaskID: String] = [:]
    /// Names given with ``name(_:as:)`` (an `out=` file name), which the URL's does not replace.
    private var givenNames: [DownloadQueue.TaskID: String] = [:]
    private var urls: [DownloadQueue.TaskID: URL] = [:]
    private var active: [DownloadQueue.TaskID: BatchSnapshot.Download] = [:]
    private var done = 0
    private var failed = 0
    private var doneBytes: Int64 = 0
    private var display = BatchProgressDisplay()
    private var throttle: RedrawThrottle
    private var pending: [BatchEvent] = []

    init(mode: OutputMode, total: Int) {
        self.mode = mode
        self.total = total
        throttle = RedrawThrottle(
            interval: mode == .terminal ? RedrawThrottle.terminalInterval : RedrawThrottle.plainInterval,
            startingAt: mode == .terminal ? nil : .now)
    }

    func handle(_ event: DownloadQueue.Event) {
        switch event {
        case .added(let id, let url):
            let last = url.lastPathComponent
            names[id] = givenNames[id] ?? (last.isEmpty || last == "/" ? (url.host ?? url.absoluteString) : last)
            urls[id] = url
            return
        case .started(let id):
            let name = names[id] ?? id.description
            active[id] = .init(name: name, state: .connecting)
            emitJSON(id, "task-started", [("url", .string(urls[id]?.absoluteString ?? ""))])
            pending.append(.started(name: name, expectedLength: nil))
        case .download(let id, let event):
            if case .progress(let progress) = event {
                active[id]?.bytesOnDisk = progress.bytesOnDisk
                active[id]?.expectedLength = progress.expectedLength
                active[id]?.bytesPerSecond = progress.bytesPerSecond
                active[id]?.state = .receiving
            } else if case .retrying(let attempt, _, _) = event {
                active[id]?.state = .retrying(attempt: attempt)
            }
            if mode == .json, case .object(var fields) = EventJSON.event(event) {
                fields.insert(("id", .string(id.description)), at: 0)
                Console.err(JSONValue.object(fields).serialized)
            }
        case .finished(let id, let result):
            active[id] = nil
            done += 1
            doneBytes += result.bytesOnDisk
            let name = result.fileURL.lastPathComponent
            pending.append(.finished(name: name, bytes: result.bytesOnDisk))
            emitJSON(
                id, "task-finished", [("path", .string(result.fileURL.path)), ("bytes", .int(result.bytesOnDisk))])
        case .finishedEarlier(let id):
            active[id] = nil
            done += 1
            emitJSON(id, "task-finished", [])
        case .failed(let id, let error):
            active[id] = nil
            failed += 1
            pending.append(.failed(name: names[id] ?? id.description, message: error.message))
            emitJSON(
                id, "task-failed",
                [("error", EventJSON.error(error)), ("resumable", .bool(error.resumeToken != nil))])
        case .paused(let id):
            active[id] = nil
            emitJSON(id, "task-paused", [])
        case .cancelled(let id):
            active[id] = nil
            emitJSON(id, "task-cancelled", [])
        }
        draw(force: false)
    }

    /// An event line: `--json` only (`--json --quiet` prints the final object alone, as a single download does).
    private func emitJSON(_ id: DownloadQueue.TaskID, _ name: String, _ fields: [(String, JSONValue)]) {
        guard mode == .json else { return }
        Console.err(JSONValue.object([("event", .string(name)), ("id", .string(id.description))] + fields).serialized)
    }

    private var snapshot: BatchSnapshot {
        let downloads = active.values.sorted { $0.name < $1.name }
        let bytes = doneBytes + downloads.reduce(0) { $0 + $1.bytesOnDisk }
        return BatchSnapshot(
            active: downloads, filesDone: done, filesFailed: failed, filesTotal: total, bytesOnDisk: bytes,
            expectedBytes: nil, bytesPerSecond: downloads.reduce(0) { $0 + $1.bytesPerSecond },
            estimatedTimeRemaining: nil)
    }

    private func draw(force: Bool) {
        switch mode {
        case .terminal:
            guard force || throttle.request(at: .now) else { return }
            let size = Console.terminalSize
            Console.errRaw(display.redraw(snapshot, events: pending, width: size?.columns ?? 80, height: size?.rows))
            pending = []
        case .plain:
            for line in BatchProgressDisplay.plainLines(for: pending) { Console.err(line) }
            pending = []
            if force || throttle.request(at: .now) { Console.err(BatchProgressDisplay.totalLine(snapshot)) }
        default:
            pending = []
        }
    }

    /// Shows the download under `name` (the file it is saved to) rather than its URL's last component.
    func name(_ id: DownloadQueue.TaskID, as name: String) {
        givenNames[id] = name
        names[id] = name
        active[id]?.name = name
    }

    /// Draws what the throttle held back, if anything.
    func drawPending() {
        guard mode == .terminal, throttle.isPending else { return }
        draw(force: false)
    }

    func finish() {
        draw(force: true)
        if mode == .terminal { Console.errRaw(display.erase()) }
    }
}
