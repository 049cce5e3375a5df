import Foundation

/// A download that streams a GET into a temporary file and can pause into a ``ResumeToken``.
///
/// Modeled on `URLSessionDownloadTask`, with resume data that works on Linux: the body streams into a
/// temporary file next to the destination; ``cancelProducingResumeData()`` stops the transfer and returns
/// a `Codable` token that this or another process passes to ``resume(from:replacingURL:configuration:)``,
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
        guard HTTPURL.isSupported(url) else {
            throw ResumableError(.invalidRequest, "not an http or https URL: \(url.absoluteString)")
        }
        var configuration = configuration
        configuration.transport = try configuration.transport.resolved()
        let headers = try Self.validatedHeaders(configuration.headers)
        let directory = configuration.temporaryDirectory?.standardizedFileURL.path ?? destination.directoryPath
        let file = try PartialFile.create(in: directory)
        let machine = ResumeStateMachine(url: url, headers: headers, maximumRedirects: configuration.maximumRedirects)
        self.init(
            engine: DownloadEngine(
                machine: machine,
                file: file,
                destination: destination,
                configuration: configuration,
                createdAt: Date()
            )
        )
    }

    /// Continues a download from a token, possibly written by another process.
    ///
    /// The temporary file is reconciled with the token first: the resume starts at the smaller of the
    /// token's offset and the file's size, and bytes beyond the token's offset are cut off. The request is
    /// `Range: bytes=N-` guarded by `If-Range`; an answer that cannot be joined restarts from byte 0.
    ///
    /// - Parameters:
    ///   - token: The token from ``cancelProducingResumeData()`` or from a failure's ``ResumableError/resumeToken``.
    ///   - replacingURL: A new URL for the same content (signed URLs expire); the validators still guard it.
    ///   - configuration: Headers are merged with the token's (the configuration's win).
    /// - Throws: ``ResumableError/Code/tokenInUse`` at once when another task or process holds the temporary
    ///   file; ``ResumableError/Code/invalidToken`` when the token names a file this library must not touch;
    ///   ``ResumableError/Code/invalidRequest`` when the configured transport cannot be loaded.
    public static func resume(
        from token: ResumeToken,
        replacingURL: URL? = nil,
        configuration: Configuration = .default
    ) throws(ResumableError) -> DownloadTask {
        if let replacingURL, !HTTPURL.isSupported(replacingURL) {
            throw ResumableError(.invalidRequest, "not an http or https URL: \(replacingURL.absoluteString)")
        }
        var configuration = configuration
        configuration.transport = try configuration.transport.resolved()
        let destination = Destination(tokenValue: token.destination, tempPath: token.tempPath)
        try TokenPlacement.validate(
            token, destination: destination, temporaryDirectory: configuration.temporaryDirectory)
        let file: PartialFile
        var reconciled = false
        do throws(ResumableError) {
            file = try PartialFile.openExisting(at: token.tempPath)
        } catch  where error.code == .tokenGone {
            // The bytes are gone but the token is sound: start again cleanly in the same place.
            file = try PartialFile.create(in: (token.tempPath as NSString).deletingLastPathComponent)
            reconciled = true
        }
        let bytesOnDisk = try file.size()
        var merged = token.headers
        for (name, value) in configuration.headers { merged[name] = value }
        let headers = try validatedHeaders(merged)
        let machine = ResumeStateMachine(
            token: token,
            bytesOnDisk: bytesOnDisk,
            replacingURL: replacingURL,
            headers: headers,
            maximumRedirects: configuration.maximumRedirects
        )
        let engine = DownloadEngine(
            machine: machine,
            file: file,
            destination: destination,
            configuration: configuration,
            createdAt: token.createdAt
        )
        if reconciled || bytesOnDisk < token.offset {
            engine.events.send(.reconciled(tokenOffset: token.offset, bytesOnDisk: bytesOnDisk))
        }
        return DownloadTask(engine: engine)
    }

    private static func validatedHeaders(_ headers: [String: String]) throws(ResumableError) -> [HTTPHeader] {
        var fields: [HTTPHeader] = []
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) {
            guard HTTPFieldSyntax.isValidName(name), HTTPFieldSyntax.isValidValue(value) else {
                throw ResumableError(.invalidRequest, "invalid request header \(name.debugDescription)")
            }
            fields.append(HTTPHeader(name: name, value: value))
        }
        return fields
    }

    /// The finished download, or the error that ended it.
    public var result: Result<DownloadResult, ResumableError> {
        get async { await task.value }
    }

    /// The finished download.
    ///
    /// - Throws: ``ResumableError``; a transient one carries a ``ResumableError/resumeToken``.
    public var value: DownloadResult {
        get async throws(ResumableError) { try await task.value.get() }
    }

    /// The download's events: starts, resumes, restarts, progress, retries, the finish.
    ///
    /// Each access returns a new stream. It begins with every event sent so far (progress only as its latest
    /// value), so subscribing late loses nothing, and it ends when the task ends.
    public var events: AsyncStream<DownloadEvent> {
        engine.events.subscribe()
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
    /// Returns `nil` when resuming is impossible: nothing was written yet, or the server sent a
    /// content-encoded body (its byte offsets cannot be trusted). The temporary file is removed then.
    /// After the task finished, returns `nil` too.
    public func cancelProducingResumeData() async -> ResumeToken? {
        engine.requestStop(.pause)
        task.cancel()
        guard case .failure = await task.value else { return nil }
        return engine.makeToken()
    }

    /// Stops the transfer and deletes the temporary file.
    public func cancel() {
        engine.requestStop(.discard)
        task.cancel()
    }
}
