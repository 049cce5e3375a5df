import Foundation

/// A download that streams a GET into a temporary file and can pause into a ``ResumeToken``.
///
/// Modeled on `URLSessionDownloadTask`, with resume data that works on Linux: the body streams into a
/// temporary file next to the destination; ``cancelProducingResumeData()`` stops the transfer and returns
/// a `Codable` token that this or another process passes to ``resume(from:destination:replacingURL:configuration:)``,
/// which continues with a validated range request. When the file is complete it is moved to its
/// destination under its suggested name.
///
/// ```swift
/// let task = try DownloadTask(url: url, destination: .directory(downloads))
/// for await case .progress(let progress) in task.events { print(progress.bytesOnDisk) }
/// let result = try await task.value
/// ```
///
/// A task starts when it is created. It is `Sendable`: pause, cancel and await it from any task.
///
/// A task runs until it finishes, fails, is paused or cancelled, whether or not anyone keeps a reference to
/// it or awaits it, like a `URLSessionTask` that was resumed: dropping the last reference neither stops nor
/// pauses it (its checkpoints, if configured, keep being written). To stop a download, pause it with
/// ``cancelProducingResumeData()``, cancel it with ``cancel()``, or cancel the task awaiting ``value``.
public final class DownloadTask: Sendable {
    private let engine: DownloadEngine
    private let task: Task<Result<DownloadResult, ResumableError>, Never>

    private init(engine: DownloadEngine) {
        self.engine = engine
        self.task = Task { await engine.run() }
    }

    /// Starts downloading `url` into a new temporary file.
    ///
    /// - Parameters:
    ///   - url: An http or https URL.
    ///   - destination: Where the finished file goes; by default the current directory, under the name
    ///     the server suggests (`Content-Disposition`) or the URL's last path component.
    ///   - configuration: Headers, retries, timeouts, checkpoints.
    /// - Throws: ``ResumableError`` when the URL is not http(s), a header is invalid, the configured transport
    ///   cannot be loaded, or the temporary file cannot be created.
    public convenience init(
        url: URL,
        destination: Destination = .currentDirectory,
        configuration: Configuration = .default
    ) throws(ResumableError) {
        if let problem = HTTPURL.problem(with: url) {
            throw ResumableError(.invalidRequest, "\(problem): \(HTTPURL.excerpt(url.absoluteString))")
        }
        var configuration = configuration
        configuration.transport = try configuration.transport.resolved()
        try configuration.tls.validate()
        try configuration.proxy.validate()
        try configuration.connections.validate()
        let headers = try Self.validatedHeaders(configuration.headers)
        let expectedSHA256 = try configuration.expectedSHA256.map(Self.validatedDigest)
        let directory = configuration.temporaryDirectory?.standardizedFileURL.path ?? destination.directoryPath
        let file = try PartialFile.create(in: directory)
        let state = ResumeState(
            url: url,
            headers: headers,
            sensitiveHeaderNames: configuration.sensitiveHeaderNames,
            destination: destination,
            tempPath: file.path,
            createdAt: Date(),
            expectedSHA256: expectedSHA256
        )
        self.init(
            engine: DownloadEngine(
                machine: ResumeStateMachine(state: state, maximumRedirects: configuration.maximumRedirects),
                file: file,
                configuration: configuration,
                existingFile: configuration.existingFile
            )
        )
    }

    /// Continues a download from a token, possibly written by another process.
    ///
    /// A token is data from outside. Its temporary file is used only when it proves to be this user's own
    /// download: it exists, has this library's naming, lies in the token's destination directory (or the
    /// configured temporary directory, or `destination`'s directory), is a regular file with one link, and
    /// belongs to this user. The token's own destination is honored only then; otherwise pass `destination`.
    /// ``ExistingFilePolicy/overwrite`` never applies to a destination that only the token named (a free
    /// name is chosen instead).
    ///
    /// The resume starts at the smaller of the token's offset and the file's size; bytes beyond the token's
    /// offset are cut off. The request is `Range: bytes=N-` guarded by `If-Range`; an answer that cannot be
    /// joined restarts from byte 0 in a new temporary file.
    ///
    /// - Parameters:
    ///   - token: The token from ``cancelProducingResumeData()`` or from a failure's ``ResumableError/resumeToken``.
    ///   - destination: Where the finished file goes; `nil` keeps the token's destination, which requires the
    ///     token's temporary file to be present and this user's. When the temporary file lies neither in this
    ///     destination's directory nor in the configured temporary directory (spelled as given), the bytes the token
    ///     lists are first copied there, and only those (this call blocks for the copy, which the kernel makes) and
    ///     the checkpoint handler receives a token naming the copy;
    ///     the old file stays, locked, until the task ends. Every later token pairs the new destination with a file
    ///     beside it.
    ///   - replacingURL: A new URL for the same content (signed URLs expire); the validators still guard it.
    ///   - configuration: Headers are merged with the token's (the configuration's win).
    /// - Throws: ``ResumableError/Code/tokenInUse`` at once when another task or process holds the temporary
    ///   file; ``ResumableError/Code/invalidToken`` when the token names a file this library must not touch;
    ///   ``ResumableError/Code/destinationRequired`` when the temporary file is gone and no `destination` was
    ///   given; ``ResumableError/Code/tokenGone`` when the download already finished;
    ///   ``ResumableError/Code/invalidRequest`` when a URL or header is invalid or the transport cannot be loaded.
    public static func resume(
        from token: ResumeToken,
        destination: Destination? = nil,
        replacingURL: URL? = nil,
        configuration: Configuration = .default
    ) throws(ResumableError) -> DownloadTask {
        if let replacingURL, let problem = HTTPURL.problem(with: replacingURL) {
            throw ResumableError(.invalidRequest, "\(problem): \(HTTPURL.excerpt(replacingURL.absoluteString))")
        }
        var configuration = configuration
        configuration.transport = try configuration.transport.resolved()
        try configuration.tls.validate()
        try configuration.proxy.validate()
        try configuration.connections.validate()
        var merged = token.headers
        for (name, value) in configuration.headers { merged[name] = value }
        let headers = try validatedHeaders(merged)
        var expectedSHA256 = token.expectedSHA256
        if let asked = try configuration.expectedSHA256.map(validatedDigest) {
            if let stored = expectedSHA256, stored != asked {
                throw ResumableError(
                    .invalidRequest,
                    "the configuration expects SHA-256 \(asked), but the token's download expects \(stored)")
            }
            expectedSHA256 = asked
        }
        let opened = try Reconciliation.open(
            token, destination: destination, temporaryDirectory: configuration.temporaryDirectory)
        var state = ResumeState(
            token: token,
            destination: opened.destination,
            tempPath: opened.file.path,
            bytesOnDisk: opened.bytesOnDisk,
            replacingURL: replacingURL,
            headers: headers,
            sensitiveHeaderNames: configuration.sensitiveHeaderNames,
            expectedSHA256: expectedSHA256
        )
        var file = opened.file
        var relocatedFrom: PartialFile?
        if !opened.startedOver,
            let directory = Reconciliation.relocationDirectory(
                of: file.path, destination: destination, temporaryDirectory: configuration.temporaryDirectory)
        {
            relocatedFrom = file
            file = try relocate(file, into: directory, state: &state, checkpointing: configuration.checkpointing)
        }
        var existingFile = configuration.existingFile
        if opened.destinationFromToken && existingFile == .overwrite { existingFile = .chooseFreeName }
        let engine = DownloadEngine(
            machine: ResumeStateMachine(state: state, maximumRedirects: configuration.maximumRedirects),
            file: file,
            configuration: configuration,
            existingFile: existingFile,
            relocatedFrom: relocatedFrom
        )
        if opened.startedOver || opened.bytesOnDisk < token.offset {
            engine.events.send(.reconciled(tokenOffset: token.offset, bytesOnDisk: state.offset))
        }
        return DownloadTask(engine: engine)
    }

    /// Copies a resume's bytes beside its new destination, in the order that keeps a token on disk true at every
    /// instant (as a restart's switch to a new file does): the copy is made and flushed, and a token naming it is
    /// recorded. The old file stays, locked, until the task ends (``DownloadEngine``'s `relocatedFrom`): a token
    /// that still names it (the caller's, without a checkpoint handler; a copy of the token file) finds it after a
    /// crash, and is refused as in use while the task runs. A crash leaves the old token with its file, or the new
    /// token with its copy, and at most a stray copy of the other. On failure nothing changed: the copy is removed
    /// and `file` released.
    private static func relocate(
        _ file: PartialFile, into directory: String, state: inout ResumeState,
        checkpointing: Checkpointing?
    ) throws(ResumableError) -> PartialFile {
        let copy: PartialFile
        do throws(ResumableError) {
            copy = try file.copy(state.bytesPresent, into: directory)
            var moved = state
            moved.tempPath = copy.path
            do throws(ResumableError) {
                try CheckpointWriter(checkpointing: checkpointing, path: copy.path).record(moved.token())
            } catch {
                copy.remove()
                copy.release()
                throw error
            }
            state = moved
        } catch {
            file.release()
            throw error
        }
        return copy
    }

    private static func validatedDigest(_ text: String) throws(ResumableError) -> String {
        guard let digest = SHA256Digest.normalized(text) else {
            throw ResumableError(
                .invalidRequest, "expectedSHA256 must be 64 hexadecimal digits, not \(text.debugDescription)")
        }
        return digest
    }

    /// The most bytes of request headers (names and values together) a download takes: 64 KiB, far beyond what
    /// servers accept (nginx: 8 KiB a line). A token keeps its download's headers (all but credentials), and a token,
    /// or a task record holding one, must stay far below the 1 MiB its reader accepts, or a checkpoint could never be
    /// written.
    static let maximumHeaderBytes = 64 * 1024

    private static func validatedHeaders(_ headers: [String: String]) throws(ResumableError) -> [HTTPHeader] {
        var fields: [HTTPHeader] = []
        var total = 0
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) {
            guard HTTPFieldSyntax.isValidName(name), HTTPFieldSyntax.isValidValue(value) else {
                throw ResumableError(
                    .invalidRequest, "invalid request header \(HTTPURL.excerpt(name).debugDescription)")
            }
            total += name.utf8.count + value.utf8.count
            fields.append(HTTPHeader(name: name, value: value))
        }
        guard total <= maximumHeaderBytes else {
            throw ResumableError(
                .invalidRequest,
                "request headers of \(total) bytes are more than the \(maximumHeaderBytes) taken (names and values together)"
            )
        }
        return fields
    }

    /// The finished download, or the error that ended it.
    ///
    /// Cancelling the task that awaits this pauses the download, as ``value`` describes.
    public var result: Result<DownloadResult, ResumableError> {
        get async {
            await withTaskCancellationHandler {
                await task.value
            } onCancel: { [engine, task] in
                engine.requestStop(.pause("the task awaiting the download was cancelled; the download paused"))
                task.cancel()
            }
        }
    }

    /// The finished download.
    ///
    /// Cancelling the task that awaits this value pauses the download, so structured concurrency loses nothing:
    /// the thrown error has code ``ResumableError/Code/paused`` and carries the ``ResumableError/resumeToken``
    /// (when anything was on disk), exactly as after ``cancelProducingResumeData()``. Every other awaiter sees the
    /// same error.
    ///
    /// - Throws: ``ResumableError``; one that leaves something to resume carries a ``ResumableError/resumeToken``:
    ///   a transient failure, a pause, a passed ``Configuration/deadline``.
    public var value: DownloadResult {
        get async throws(ResumableError) { try await result.get() }
    }

    /// The download's events: starts, resumes, restarts, progress, retries, the finish.
    ///
    /// Each access returns a new stream. It begins with every event sent so far (progress only as its latest
    /// value), so subscribing late loses nothing, and it ends when the task ends.
    public var events: AsyncStream<DownloadEvent> {
        engine.events.subscribe()
    }

    /// The last progress event sent, without subscribing to the events.
    var latestProgress: DownloadProgress? {
        engine.events.latestProgress
    }

    /// The download's progress from now on, at most once per ``Configuration/progressInterval``.
    public var progress: AsyncCompactMapSequence<AsyncStream<DownloadEvent>, DownloadProgress> {
        events.compactMap { event in
            if case .progress(let progress) = event { return progress }
            return nil
        }
    }

    /// Stops the transfer, flushes what arrived, keeps the temporary file, and returns a token to resume.
    ///
    /// Returns `nil` when resuming is impossible: nothing was written yet, or the bytes could not be flushed
    /// to disk.
    /// The temporary file is removed when nothing can be resumed. After the task finished, returns `nil` too.
    /// ``value`` then throws ``ResumableError/Code/paused`` with the same token.
    public func cancelProducingResumeData() async -> ResumeToken? {
        engine.requestStop(.pause("the download was paused"))
        task.cancel()
        guard case .failure = await task.value else { return nil }
        return engine.makeToken()
    }

    /// ``cancelProducingResumeData()`` without waiting for the token: the transfer stops (also one waiting in a rate
    /// limiter) and leaves its last token with the task's checkpointing. For an owner that is going away.
    func requestPause(_ message: String) {
        engine.requestStop(.pause(message))
        task.cancel()
    }

    /// Whether a stop (a pause, the deadline, a cancel) was asked for; for tests that must act only once it was.
    var isStopRequested: Bool {
        engine.isStopRequested
    }

    /// Stops the transfer and deletes the temporary file; ``value`` throws ``ResumableError/Code/cancelled`` with
    /// no token, and a ``Configuration/checkpointing`` file is removed.
    public func cancel() {
        engine.requestStop(.discard)
        task.cancel()
    }
}
