import Foundation
import LoopbackServer
import Synchronization

@testable import Resumable

/// A running download whose end can be checked without waiting for it.
final class SoakWatchedTask: Sendable {
    let task: DownloadTask
    let startedAt = ContinuousClock.now
    private let ending = Mutex<Result<DownloadResult, ResumableError>?>(nil)

    init(_ task: DownloadTask) {
        self.task = task
        Task { [self] in
            let result = await task.result
            ending.withLock { $0 = result }
        }
    }

    /// The result, once the task ended.
    var result: Result<DownloadResult, ResumableError>? {
        ending.withLock { $0 }
    }
}

/// Runs one planned download: queues its faults, pauses and resumes it through tokens on disk, changes the
/// content when planned, and judges how it ended.
///
/// The oracle: the content registered at the path changes only while no task of this download runs (at a
/// pause), and other versions are only ever served cut short, so the one correct result of a success is the
/// content registered last. Every token met on the way must describe the bytes on disk: its first `offset`
/// bytes are a prefix of the version its validators name.
struct SoakDownload {
    /// How long one download may take before it counts as hung: generous, as the soak runs beside the whole
    /// suite in parallel, where a busy machine can keep a download waiting for many seconds.
    static let deadline = Duration.seconds(120)

    let plan: SoakPlan
    let server: LoopbackServer
    /// The destination directory, holding only this download's files.
    let directory: URL
    /// Where tokens are written on their way from one task to the next.
    let tokenDirectory: URL
    private var report: SoakReport
    /// The version registered at the path now.
    private var current: SoakVersion
    private var resumesLeft: Int
    /// How many queued steps had been served when the running task started.
    private var servedBeforeTask = 0
    /// How many times the download was handed on through a token.
    private var handOffs = 0

    init(plan: SoakPlan, server: LoopbackServer, directory: URL, tokenDirectory: URL) {
        self.plan = plan
        self.server = server
        self.directory = directory
        self.tokenDirectory = tokenDirectory
        report = SoakReport(plan: plan)
        current = plan.initial
        resumesLeft = plan.resumeBudget
    }

    private var configuration: DownloadTask.Configuration {
        DownloadTask.Configuration(
            retry: .init(
                maximumRetries: plan.maximumRetries, initialDelay: .milliseconds(5), maximumDelay: .milliseconds(20)),
            idleTimeout: .seconds(5),
            transport: plan.transport
        )
    }

    /// Runs the download to its end and reports.
    mutating func run() async -> SoakReport {
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            report.outcome = .unexpectedError("setup")
            report.detail = "cannot create \(directory.path): \(error)"
            return report
        }
        server.register(plan.initial.resource(behavior: plan.baseBehavior), at: plan.path)
        for step in plan.steps {
            switch step.action {
            case .behavior(let behavior): server.enqueue(behavior: behavior, for: plan.path)
            case .scripted(let response): server.enqueue(response, for: plan.path)
            }
        }
        await drive()
        report.servedSteps = consumedSteps
        report.requests = server.requests(for: plan.path).count
        server.clearQueue(for: plan.path)
        server.removeResource(at: plan.path)
        try? FileManager.default.removeItem(at: directory)
        return report
    }

    private var consumedSteps: Int {
        plan.steps.count - server.queuedCount(for: plan.path)
    }

    private enum Wake {
        case ended(Result<DownloadResult, ResumableError>)
        case gate(SoakPause)
        case timed
        case hung
    }

    private mutating func drive() async {
        let deadline = ContinuousClock.now + Self.deadline
        var gates = plan.steps.indices.compactMap { index in plan.steps[index].pause.map { (index, $0) } }
        var timedPause = plan.timedPause
        guard var watched = startFresh() else { return }
        while true {
            let wake = await wait(for: watched, gate: gates.first, timed: timedPause, deadline: deadline)
            let next: SoakWatchedTask?
            switch wake {
            case .hung:
                watched.task.cancel()
                report.outcome = .hung
                report.detail = "no end after \(Self.deadline); \(consumedSteps) of \(plan.steps.count) steps served"
                return
            case .ended(.success(let result)):
                judge(result)
                return
            case .ended(.failure(let error)):
                next = failed(error)
            case .gate(let pause):
                gates.removeFirst()
                next = await pauseAndResume(watched, jitter: pause.jitter, pause: pause)
            case .timed:
                timedPause = nil
                report.journal.append("timed pause")
                next = await pauseAndResume(watched, jitter: .zero, pause: nil)
            }
            guard let next else { return }
            watched = next
        }
    }

    /// Polls until the task ends, the next trickling response was asked for, or the timed pause is due.
    private func wait(
        for watched: SoakWatchedTask,
        gate: (index: Int, pause: SoakPause)?,
        timed: Duration?,
        deadline: ContinuousClock.Instant
    ) async -> Wake {
        while true {
            if let result = watched.result { return .ended(result) }
            if let gate, consumedSteps > gate.index { return .gate(gate.pause) }
            if let timed, ContinuousClock.now - watched.startedAt >= timed { return .timed }
            if ContinuousClock.now >= deadline { return .hung }
            try? await Task.sleep(for: .milliseconds(2))
        }
    }

    // MARK: - Hand-offs

    /// Pauses into a token, changes the content when planned, and resumes through the token on disk.
    private mutating func pauseAndResume(_ watched: SoakWatchedTask, jitter: Duration, pause: SoakPause?) async
        -> SoakWatchedTask?
    {
        try? await Task.sleep(for: jitter)
        let token = await watched.task.cancelProducingResumeData()
        let result = await watched.task.result
        if let token {
            report.pausesWithToken += 1
            report.journal.append("paused at \(token.offset) (\(Self.describe(token)))")
            check(token, "the pause token")
            expectDirectory(holdsOnly: (token.tempPath as NSString).lastPathComponent, "after a pause")
            change(pause)
            return resume(from: token)
        }
        switch result {
        case .success(let finished):
            report.pausesTooLate += 1
            report.journal.append("paused too late: already finished")
            judge(finished)
            return nil
        case .failure(let error) where error.code != .paused:
            report.journal.append("paused too late: already failed")
            return failed(error)
        case .failure:
            report.pausesWithoutToken += 1
            report.journal.append("paused before any byte was kept: no token")
            expectDirectory(holdsOnly: nil, "after a pause without a token")
            change(pause)
            return startFresh()
        }
    }

    private mutating func change(_ pause: SoakPause?) {
        guard let pause, let version = pause.changeTo else { return }
        server.register(version.resource(behavior: pause.changedBehavior), at: plan.path)
        current = version
        report.contentChanges += 1
        report.journal.append("registered \(version.label)")
    }

    /// Deals with a failure: resumes a transient one while the budget lasts, else ends with a clear error.
    private mutating func failed(_ error: ResumableError) -> SoakWatchedTask? {
        let code = Self.label(error)
        report.journal.append("failed: \(error)")
        if let token = error.resumeToken {
            check(token, "the failure's token")
            expectDirectory(holdsOnly: (token.tempPath as NSString).lastPathComponent, "after a failure with a token")
        } else {
            expectDirectory(holdsOnly: nil, "after a failure without a token")
        }
        // The engine gives up only after `maximumRetries + 1` failed requests in a row, and every failed request
        // takes a queued step (the server is correct once the queue is empty).
        let served = consumedSteps - servedBeforeTask
        if error.isTransient, served <= plan.maximumRetries {
            report.issues.append(
                "gave up with \(error) after \(served) faulty answers, with \(plan.maximumRetries) retries allowed")
        }
        guard Self.isSensible(error) else {
            report.outcome = .unexpectedError(code)
            report.detail = "failed with \(error)"
            return nil
        }
        guard error.isTransient, resumesLeft > 0 else {
            report.outcome = .clearError(code)
            if plan.mustFinish {
                report.issues.append(
                    "gave up with \(error) although its resume budget (\(plan.resumeBudget)) covers every queued fault")
            }
            return nil
        }
        resumesLeft -= 1
        report.failureResumes += 1
        if let token = error.resumeToken {
            return resume(from: token)
        }
        report.freshStarts += 1
        return startFresh()
    }

    private mutating func startFresh() -> SoakWatchedTask? {
        // Read before the task starts: it sends its first request at once.
        servedBeforeTask = consumedSteps
        do {
            let task = try DownloadTask(
                url: server.url(for: plan.path), destination: .directory(directory), configuration: configuration)
            return SoakWatchedTask(task)
        } catch {
            report.outcome = .unexpectedError("start " + Self.label(error))
            report.detail = "starting the download failed: \(error)"
            return nil
        }
    }

    /// Writes the token to disk, reads it back as another process would, and resumes from what was read.
    private mutating func resume(from token: ResumeToken) -> SoakWatchedTask? {
        let file = tokenDirectory.appendingPathComponent("download-\(plan.index).json")
        do {
            try token.write(to: file)
            let decoded = try ResumeToken(contentsOf: file)
            if decoded != token {
                report.issues.append("the token changed on its way through disk: \(token) became \(decoded)")
            }
            try? FileManager.default.removeItem(at: file)
            tamper(with: decoded.tempPath, offset: decoded.offset)
            report.journal.append("resumed at \(decoded.offset)")
            servedBeforeTask = consumedSteps
            // Without its temporary file a token proves nothing about its destination: the caller chooses.
            let gone = !FileManager.default.fileExists(atPath: decoded.tempPath)
            let destination: DownloadTask.Destination? =
                gone ? .directory(URL(fileURLWithPath: (decoded.tempPath as NSString).deletingLastPathComponent)) : nil
            return SoakWatchedTask(
                try DownloadTask.resume(from: decoded, destination: destination, configuration: configuration))
        } catch {
            report.outcome = .unexpectedError("resume " + Self.label(error))
            report.detail = "resuming from \(Self.describe(token)) failed: \(error)"
            return nil
        }
    }

    /// Changes the temporary file as a killed process may leave it, when the plan says so for this hand-off.
    private mutating func tamper(with path: String, offset: Int64) {
        let tamper = plan.tampers[handOffs % plan.tampers.count]
        handOffs += 1
        switch tamper {
        case .none:
            return
        case .truncate(let fraction):
            guard let handle = FileHandle(forWritingAtPath: path) else { return }
            try? handle.truncate(atOffset: UInt64(Double(offset) * fraction))
            try? handle.close()
        case .append(let count):
            guard let handle = FileHandle(forWritingAtPath: path) else { return }
            _ = try? handle.seekToEnd()
            try? handle.write(contentsOf: Resource.generatedBytes(seed: UInt64(count), range: 0..<Int64(count)))
            try? handle.close()
        case .delete:
            try? FileManager.default.removeItem(atPath: path)
        }
        report.tampers += 1
        report.journal.append("temporary file: \(tamper)")
    }

    // MARK: - The oracle

    /// Judges a success: the file must hold exactly the content registered last, alone in its directory.
    private mutating func judge(_ result: DownloadResult) {
        let bytes = (try? Data(contentsOf: result.fileURL)).map { [UInt8]($0) }
        if let bytes, SoakBytes.equal(bytes, current.bytes) {
            report.outcome = .finishedCorrect
        } else {
            report.outcome = .wrong(result.fileURL.lastPathComponent)
            report.detail = "claimed success with wrong bytes: " + explain(bytes)
        }
        report.journal.append("finished with status \(result.status)")
        if result.bytesOnDisk != Int64(current.bytes.count) {
            report.issues.append(
                "the result says \(result.bytesOnDisk) bytes, \(current.label) has \(current.bytes.count)")
        }
        if result.etag != current.etag || (current.lastModified != nil && result.lastModified != current.lastModified) {
            report.issues.append(
                "the result names validators \(result.etag ?? "-") / \(result.lastModified ?? "-"), "
                    + "\(current.label) has \(current.etag ?? "-") / \(current.lastModified ?? "-")")
        }
        expectDirectory(holdsOnly: result.fileURL.lastPathComponent, "after finishing")
    }

    /// What the wrong bytes are made of: runs of which versions, in order.
    private func explain(_ bytes: [UInt8]?) -> String {
        guard let bytes else { return "the finished file cannot be read" }
        var text = "\(bytes.count) bytes, expected \(current.bytes.count) bytes of \(current.label) (\(current.origin))"
        var runs: [String] = []
        var position = 0
        while position < bytes.count, runs.count < 6 {
            let lengths = plan.versions.map { SoakBytes.commonRun(bytes, $0.bytes, from: position) }
            guard let best = lengths.indices.max(by: { lengths[$0] < lengths[$1] }), lengths[best] > 0 else {
                runs.append("byte \(position) is in no version")
                break
            }
            runs.append("\(position)..<\(position + lengths[best]) of \(plan.versions[best].label)")
            position += lengths[best]
        }
        text += "; the file holds " + runs.joined(separator: ", ")
        for version in plan.versions where version.label != current.label && SoakBytes.equal(version.bytes, bytes) {
            text += "; it is exactly \(version.label) (\(version.origin))"
        }
        return text
    }

    /// Checks that a token describes the bytes on disk: its first `offset` bytes are a prefix of the version its
    /// validators name, and its expected length is that version's.
    private mutating func check(_ token: ResumeToken, _ what: String) {
        let subject = "\(what) \(Self.describe(token))"
        guard (token.tempPath as NSString).deletingLastPathComponent == directory.path else {
            report.issues.append("\(subject) names a file outside the download directory")
            return
        }
        guard let data = FileManager.default.contents(atPath: token.tempPath) else {
            report.issues.append("\(subject): its temporary file is missing")
            return
        }
        guard data.count >= token.offset else {
            report.issues.append("\(subject): its temporary file holds only \(data.count) bytes")
            return
        }
        let named = plan.versions.filter { $0.etag == token.etag && $0.lastModified == token.lastModified }
        guard !named.isEmpty else {
            report.issues.append("\(subject): its validators name no version the server sent")
            return
        }
        let prefix = [UInt8](data.prefix(Int(token.offset)))
        if !named.contains(where: { SoakBytes.isPrefix(prefix, of: $0.bytes) }) {
            let labels = named.map(\.label).joined(separator: "/")
            report.issues.append(
                "\(subject): the \(token.offset) bytes on disk are not a prefix of \(labels), which its validators name"
            )
        }
        if let expectedLength = token.expectedLength, !named.contains(where: { $0.bytes.count == expectedLength }) {
            report.issues.append("\(subject): expected length \(expectedLength) is not the length of the version")
        }
    }

    /// Checks that the download's directory holds exactly `name` (or nothing): no temporary file leaks.
    private mutating func expectDirectory(holdsOnly name: String?, _ when: String) {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
        let expected = name.map { [$0] } ?? []
        if names != expected {
            report.issues.append("\(when), the download directory holds \(names), expected \(expected)")
        }
    }

    // MARK: - Errors

    /// Whether an error is one the soak's faults can cause: a network failure, a timeout, an early end, a 5xx,
    /// or a server whose answers never fit together.
    static func isSensible(_ error: ResumableError) -> Bool {
        switch error.code {
        case .network, .timedOut, .incompleteBody, .protocolViolation:
            return true
        case .httpStatus:
            return error.httpStatus.map { (500...599).contains($0) } ?? false
        default:
            return false
        }
    }

    /// `network`, `httpStatus 503`, …
    static func label(_ error: any Error) -> String {
        guard let error = error as? ResumableError else { return "\(type(of: error))" }
        if let status = error.httpStatus { return "\(error.code) \(status)" }
        return "\(error.code)"
    }

    static func describe(_ token: ResumeToken) -> String {
        "offset \(token.offset) of \(token.expectedLength.map(String.init) ?? "?"), "
            + "ETag \(token.etag ?? "-"), Last-Modified \(token.lastModified ?? "-")"
    }
}

/// Byte comparisons with `memcmp`: the generic `==` of arrays is slow in debug builds, and the soak compares
/// megabytes.
enum SoakBytes {
    static func equal(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        lhs.count == rhs.count && isPrefix(lhs, of: rhs)
    }

    static func isPrefix(_ prefix: [UInt8], of bytes: [UInt8]) -> Bool {
        guard prefix.count <= bytes.count else { return false }
        return prefix.withUnsafeBytes { head in
            bytes.withUnsafeBytes { whole in
                head.isEmpty || memcmp(head.baseAddress!, whole.baseAddress!, head.count) == 0
            }
        }
    }

    /// How many bytes from `start` on are the same in both.
    static func commonRun(_ lhs: [UInt8], _ rhs: [UInt8], from start: Int) -> Int {
        let available = min(lhs.count, rhs.count) - start
        guard available > 0 else { return 0 }
        return lhs.withUnsafeBytes { left in
            rhs.withUnsafeBytes { right in
                let a = left.baseAddress! + start
                let b = right.baseAddress! + start
                if memcmp(a, b, available) == 0 { return available }
                // Halve the stretch that holds the first difference until it is found.
                var low = 0
                var high = available
                while high - low > 1 {
                    let middle = (low + high) / 2
                    if memcmp(a, b, middle) == 0 { low = middle } else { high = middle }
                }
                return low
            }
        }
    }
}
