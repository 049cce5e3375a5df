import Foundation

extension DownloadTask {
    /// Where a finished download goes.
    public struct Destination: Hashable, Sendable {
        enum Kind: Hashable, Sendable {
            case directory(String)
            case file(String)
        }

        let kind: Kind

        private init(kind: Kind) {
            self.kind = kind
        }

        /// The file goes into `directory` under its suggested, sanitized name.
        public static func directory(_ directory: URL) -> Destination {
            Destination(kind: .directory(directory.standardizedFileURL.path))
        }

        /// The file goes to exactly this path.
        public static func file(_ file: URL) -> Destination {
            Destination(kind: .file(file.standardizedFileURL.path))
        }

        /// The destination a path typed by a user names: an existing directory, or a path ending in `/`, is a
        /// directory (the file keeps its suggested name); any other path is the exact file. The CLI's `-o`.
        package static func path(_ path: String) -> Destination {
            var isDirectory: ObjCBool = false
            let exists = FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
            if path.hasSuffix("/") || (exists && isDirectory.boolValue) {
                return .directory(URL(fileURLWithPath: path, isDirectory: true))
            }
            return .file(URL(fileURLWithPath: path, isDirectory: false))
        }

        /// The current directory, under the suggested name.
        public static var currentDirectory: Destination {
            .directory(URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true))
        }

        /// The directory the finished file goes into.
        var directoryPath: String {
            switch kind {
            case .directory(let path): return path
            case .file(let path): return (path as NSString).deletingLastPathComponent
            }
        }

        /// The form stored in a token: a directory ends in `/`.
        package var tokenValue: String {
            switch kind {
            case .directory(let path): return path.hasSuffix("/") ? path : path + "/"
            case .file(let path): return path
            }
        }

        /// The destination a token's `destination` field describes.
        init(tokenValue: String?, tempPath: String) {
            guard let tokenValue else {
                kind = .directory((tempPath as NSString).deletingLastPathComponent)
                return
            }
            if tokenValue.hasSuffix("/") {
                let trimmed = String(tokenValue.dropLast())
                kind = .directory(trimmed.isEmpty ? "/" : trimmed)
            } else {
                kind = .file(tokenValue)
            }
        }
    }

    /// What happens when the finished file's name is already taken.
    public enum ExistingFilePolicy: Hashable, Sendable {
        /// Choose a free name next to it, as browsers do: `name (1).ext`, `name (2).ext`, …
        case chooseFreeName
        /// Replace the existing file (atomically, by rename). In a ``DownloadQueue``, only a file that was there
        /// before: a name another download of the same queue saved a file under (also in an earlier run on the
        /// same ``TaskStore``) gets a free name instead, as with ``chooseFreeName``.
        case overwrite
        /// Fail with ``ResumableError/Code/destinationExists``, keeping the temporary file and the token.
        case fail
    }

    /// How transient failures are retried: exponential backoff from the current offset.
    public struct RetryPolicy: Hashable, Sendable {
        /// How many failures in a row are retried. Once the failed attempts together brought 64 KiB (or all that
        /// was missing, when that is less), the count starts again; a server that sends a byte and then
        /// fails, again and again, never adds up to that, and ends the download instead of keeping it crawling.
        public var maximumRetries: Int
        /// The first delay; it doubles after each failure.
        public var initialDelay: Duration
        /// The longest delay, also the cap on a server's `Retry-After`.
        public var maximumDelay: Duration

        /// Creates a policy.
        public init(
            maximumRetries: Int, initialDelay: Duration = .milliseconds(250), maximumDelay: Duration = .seconds(5)
        ) {
            self.maximumRetries = maximumRetries
            self.initialDelay = initialDelay
            self.maximumDelay = maximumDelay
        }

        /// Five retries, 0.25 s doubling, capped at 5 s.
        public static let `default` = RetryPolicy(maximumRetries: 5)
        /// No retries: the first transient failure ends the task with a token.
        public static let none = RetryPolicy(maximumRetries: 0)

        /// The delay before retry number `attempt` (1-based).
        ///
        /// Total for any policy and any input: negative durations count as zero, and the result is never more than
        /// `maximumDelay` nor than 10^9 s (about 31.7 years), so doubling cannot overflow `Duration` and
        /// `Task.sleep(for:)` (which traps on a deadline beyond `Int64.max` seconds) can always take it.
        func delay(attempt: Int, serverAsked: Duration?) -> Duration {
            let ceiling = min(max(maximumDelay, .zero), .seconds(1_000_000_000))
            if let serverAsked { return min(max(serverAsked, .zero), ceiling) }
            var delay = min(max(initialDelay, .zero), ceiling)
            guard delay > .zero else { return .zero }
            for _ in 1..<max(attempt, 1) {
                // `delay * 2 >= ceiling`, asked without computing a product that could overflow.
                if delay >= ceiling - delay { return ceiling }
                delay *= 2
            }
            return delay
        }
    }

    /// Saving the token while the download runs, so a crash loses at most one interval.
    ///
    /// The handler is where tokens reach the disk, and the download trusts it: a token is handed over only
    /// after the bytes it covers were flushed, and when the handler throws, the download stops with that
    /// error (it never continues unrecorded; the token written before still describes the file).
    public struct Checkpointing: Sendable {
        /// How often a checkpoint is taken while bytes arrive.
        public var interval: Duration
        /// Receives each token, in order, one at a time. Throw when it could not be saved.
        ///
        /// Called as soon as a response is accepted (the offset may be 0 then), every ``interval`` while
        /// data arrives, at once when a restart switches to a new temporary file (before the old one is
        /// removed), once more before the finished file is moved into place, and when the task pauses or
        /// fails with a token. Never called after the task's result is available.
        public var handler: @Sendable (ResumeToken) throws -> Void

        /// Called once when the download finished and its file is in place, with the temporary file's path
        /// the last token named.
        var finished: (@Sendable (String) -> Void)?
        /// Called once when the task ends with nothing to resume, with its temporary file's path, right before that
        /// file is removed: a token saved before must go first, so that a crash in between never leaves a token
        /// without its bytes (a complete one would make a file of that length at the destination look finished).
        /// Returns false when a saved token still names the file (it could not be removed or rewritten): the file
        /// is then kept, so that the token still describes bytes on disk.
        package var abandoned: (@Sendable (String) -> Bool)?
        /// Takes a token that covers no byte (the one handed over when a response is accepted) without disk work,
        /// on the caller's thread, and returns true; false: hand it to ``handler`` as usual. For an owner that
        /// keeps such a token in memory only (a queue's ``TaskStore``): no hop to the checkpoint queue for it.
        var keepsInMemory: (@Sendable (ResumeToken) -> Bool)?

        /// Calls `handler` with a fresh token as described on ``handler``.
        public init(interval: Duration = .seconds(1), handler: @escaping @Sendable (ResumeToken) throws -> Void) {
            self.interval = interval
            self.handler = handler
        }

        /// Writes each checkpoint atomically to `file` (sibling, fsync, rename, fsync the directory), and keeps it
        /// true to the end: it holds the token the task paused or failed with, and it is removed when the download
        /// finished or failed with nothing to resume (a checksum mismatch, ``DownloadTask/cancel()``), so no stale
        /// token outlives its download. A file that names another download's temporary file is left alone.
        public static func file(_ file: URL, interval: Duration = .seconds(1)) -> Checkpointing {
            var checkpointing = Checkpointing(interval: interval) { token in
                try token.write(to: file)
            }
            checkpointing.finished = { tempPath in ResumeToken.removeFile(at: file, ifItNames: tempPath) }
            checkpointing.abandoned = { tempPath in
                ResumeToken.removeFileBeforeItsTemporaryFile(at: file, naming: tempPath)
            }
            return checkpointing
        }
    }

    /// Which HTTP implementation moves the bytes.
    ///
    /// Every transport sends the same requests and feeds the same resume logic; they differ only in speed and
    /// memory. ``libcurl`` drives the system's libcurl directly (loaded at run time, never linked): body bytes
    /// go from curl's buffer straight into the file, and a slow disk slows the download instead of filling
    /// memory. ``urlSession`` uses Foundation's `URLSession`, which on Linux copies every chunk and queues up to
    /// about 2.6 MiB per download before it stops reading, and whose socket event sources keep a dispatch thread
    /// busy while a response arrives slowly (measured: 2 s of CPU in 4 s on a server sending 16 KiB/s, against
    /// none for ``libcurl``).
    ///
    /// On Linux, prefer ``libcurl`` (what ``automatic`` picks) for servers you do not trust: swift-corelibs-foundation
    /// handles some answers itself, before any delegate call a transport could answer, and traps the process on a few
    /// of them (a redirect to `//[::1]/x`, a chunked body with a trailer field), or buffers a redirect's body until
    /// it ends, on a queue every `URLSession` of the process shares (a redirect whose body never ends hangs the
    /// download and stalls every other `URLSession` download).
    public struct Transport: Hashable, Sendable, CustomStringConvertible {
        enum Kind: Hashable, Sendable {
            case automatic
            case urlSession
            case libcurl
            case custom(CustomTransport)
        }

        /// A transport supplied from inside the library (tests put a watcher in front of a real one); equal
        /// only to itself.
        final class CustomTransport: Hashable, Sendable {
            let transport: any HTTPTransport

            init(_ transport: any HTTPTransport) {
                self.transport = transport
            }

            static func == (lhs: CustomTransport, rhs: CustomTransport) -> Bool { lhs === rhs }
            func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
        }

        let kind: Kind
        /// The name libcurl is loaded under; tests point it at a library that does not exist.
        let libraryName: String

        init(kind: Kind, libraryName: String = CurlLibrary.defaultName) {
            self.kind = kind
            self.libraryName = libraryName
        }

        /// libcurl when it can be loaded, otherwise `URLSession`. The default.
        public static let automatic = Transport(kind: .automatic)
        /// Foundation's `URLSession`, available everywhere; on Linux, not for servers you do not trust (see
        /// ``Transport``).
        public static let urlSession = Transport(kind: .urlSession)
        /// The system's libcurl (`libcurl.so.4`, 7.68 or later), loaded with `dlopen`. When it cannot be loaded,
        /// creating or resuming a task with it fails with ``ResumableError/Code/invalidRequest``.
        public static let libcurl = Transport(kind: .libcurl)

        /// Requests go through `transport`.
        static func custom(_ transport: any HTTPTransport) -> Transport {
            Transport(kind: .custom(CustomTransport(transport)))
        }

        /// Whether this transport can be used in this process: always, except ``libcurl`` without a loadable
        /// libcurl.
        public var isAvailable: Bool {
            (try? resolved()) != nil
        }

        public var description: String {
            switch kind {
            case .automatic: return "automatic"
            case .urlSession: return "urlSession"
            case .libcurl: return "libcurl"
            case .custom(let custom): return "custom(\(type(of: custom.transport)))"
            }
        }

        /// The transport a task really uses: ``automatic`` becomes ``libcurl`` or ``urlSession``.
        ///
        /// - Throws: ``ResumableError/Code/invalidRequest`` when ``libcurl`` was asked for and cannot be loaded.
        func resolved() throws(ResumableError) -> Transport {
            switch kind {
            case .urlSession, .custom:
                return self
            case .libcurl:
                _ = try CurlLibrary.load(libraryName).get()
                return self
            case .automatic:
                let curl = Transport(kind: .libcurl, libraryName: libraryName)
                return (try? curl.resolved()) ?? .urlSession
            }
        }
    }

    /// How a download behaves.
    public struct Configuration: Sendable {
        /// Extra request headers. Credential headers are sent to the original origin only and never stored in
        /// a token: `Authorization`, `Cookie`, `Proxy-Authorization`, any name containing `auth`, `cookie`,
        /// `credential`, `csrf`, `jwt`, `key`, `passphrase`, `passwd`, `password`, `secret`, `session`,
        /// `signature`, `token` or `xsrf` (case-insensitive, so `X-Api-Key` and `X-Amz-Security-Token` too),
        /// `DPoP`, and the names in ``sensitiveHeaderNames``. `Range`, `If-Range` and `Accept-Encoding` are the
        /// library's own and are ignored here. At most 64 KiB of names and values together (a download with more
        /// fails with ``ResumableError/Code/invalidRequest`` before its first request): a token keeps them, and it
        /// must stay readable.
        public var headers: [String: String]
        /// More header names to treat as credentials, compared case-insensitively: never stored in a token, never
        /// sent to another origin. The built-in rule (see ``headers``) always applies as well.
        public var sensitiveHeaderNames: Set<String>
        /// Where temporary files go; `nil` puts them next to the destination, so finishing is a rename.
        public var temporaryDirectory: URL?
        /// What to do when the finished file's name is taken.
        public var existingFile: ExistingFilePolicy
        /// How transient failures are retried.
        public var retry: RetryPolicy
        /// How long a transfer may stall before it fails with ``ResumableError/Code/timedOut``: a time without
        /// data. The trailer fields of a chunked body are not data: a server that sends them and never a byte more
        /// has stalled.
        public var idleTimeout: Duration
        /// How long establishing a connection (name resolution, TCP and TLS handshakes, a proxy tunnel) may take
        /// before the attempt fails with ``ResumableError/Code/timedOut``, which is retried. URLSession reports no
        /// connect phase, so on ``Transport/urlSession`` it bounds the wait for the response head instead
        /// (connecting, sending the request and the server's wait before answering). Whichever of this and
        /// ``idleTimeout`` is shorter ends a connection attempt that makes no progress.
        public var connectTimeout: Duration
        /// The longest the whole task may run, retries and pauses between them included; `nil` for no limit. When it
        /// passes, the task ends with ``ResumableError/Code/timedOut`` and a token to continue from, and is not
        /// retried.
        public var deadline: Duration?
        /// How TLS connections are verified, and the client certificate to present.
        public var tls: TLS
        /// Which proxy requests go through.
        public var proxy: Proxy
        /// How many redirects one request may follow.
        public var maximumRedirects: Int
        /// Periodic token checkpoints; `nil` for none.
        public var checkpointing: Checkpointing?
        /// Called with every event of the download, in order, on the thread that produced it: the callback
        /// form of ``DownloadTask/events``. Keep it short; it runs on the transfer's path.
        public var eventHandler: (@Sendable (DownloadEvent) -> Void)?
        /// How often progress is reported at most.
        public var progressInterval: Duration
        /// The SHA-256 the finished file must have (64 hex digits, either case). On a mismatch the temporary file is
        /// deleted, nothing is moved into place, and the task fails with ``ResumableError/Code/checksumMismatch``.
        ///
        /// Checked when the task is created (anything but 64 hex digits fails at once with
        /// ``ResumableError/Code/invalidRequest``) and kept in the token, so a resumed download verifies it too;
        /// when resuming, `nil` means the token's, and a different digest than the token's is refused.
        public var expectedSHA256: String?
        /// Whether to compute the finished file's SHA-256 into ``DownloadResult/sha256`` (implied by
        /// ``expectedSHA256``). It reads the file once more before it is moved into place.
        public var computesSHA256: Bool
        /// Which HTTP implementation moves the bytes; ``Transport/automatic`` (libcurl when it loads) by default.
        public var transport: Transport
        /// How many connections the download may use at once; ``Connections/automatic`` by default.
        public var connections: Connections
        /// The bandwidth limits the download's body bytes pass, all of them (none by default): a ``RateLimiter``
        /// shared by several downloads limits them together (a global limit), one of its own limits this download (a
        /// per-task limit); all its connections share them. Their rates can change while the download runs.
        public var rateLimiters: [RateLimiter]
        /// A transport session shared with other tasks (a queue's), used instead of a session of the task's own
        /// made from ``transport``; the task never closes it. Its owner sets ``transport`` to its
        /// ``SharedTransportSession/transport`` too, so the result reports what was used.
        var sharedSession: SharedTransportSession?
        /// The final paths of the other downloads of the same queue (set by ``DownloadQueue``): an
        /// ``ExistingFilePolicy/overwrite`` replaces a file that was there before, never one of theirs.
        var finalPathClaims: FinalPathClaims?
        /// Who this download is to ``finalPathClaims`` (its queue's identifier for it).
        var finalPathOwner = ""
        /// The smallest segment a connection is given or takes over from another (1 MiB); tests lower it.
        var minimumSegmentLength: Int64 = 1 << 20
        /// The most one connection is given at a time, in file order, while a digest is computed (8 MiB; never below
        /// ``minimumSegmentLength``): see ``SegmentSchedule/Settings/pieceLength``. Tests lower it.
        var hashingPieceLength: Int64 = 8 << 20
        /// How long a segment may receive nothing before it is asked again on a fresh connection; `nil`: the shorter
        /// of ``idleTimeout`` and 10 s. Tests lower it.
        var segmentStallTimeout: Duration?
        /// Slows the writer to about this many bytes per second, to measure backpressure (benchmarks only): the
        /// transport's thread sleeps after each write, as it would behind a slow disk. Not API: it is read from
        /// the environment variable `simulatedWriterEnvironmentVariable` when the configuration is created.
        var simulatedWriterBytesPerSecond: Int?

        /// `RESUMABLE_BENCHMARK_WRITER_BYTES_PER_SECOND`: set to a positive integer, it slows the writer of every
        /// download configured afterwards (see `Benchmarks/TransportThroughput`).
        static let simulatedWriterEnvironmentVariable = "RESUMABLE_BENCHMARK_WRITER_BYTES_PER_SECOND"

        /// Creates a configuration.
        public init(
            headers: [String: String] = [:],
            sensitiveHeaderNames: Set<String> = [],
            temporaryDirectory: URL? = nil,
            existingFile: ExistingFilePolicy = .chooseFreeName,
            retry: RetryPolicy = .default,
            idleTimeout: Duration = .seconds(60),
            connectTimeout: Duration = .seconds(30),
            deadline: Duration? = nil,
            tls: TLS = .default,
            proxy: Proxy = .environment,
            maximumRedirects: Int = 10,
            checkpointing: Checkpointing? = nil,
            progressInterval: Duration = .milliseconds(100),
            expectedSHA256: String? = nil,
            computesSHA256: Bool = false,
            transport: Transport = .automatic,
            connections: Connections = .automatic,
            rateLimiters: [RateLimiter] = []
        ) {
            self.connections = connections
            self.rateLimiters = rateLimiters
            self.expectedSHA256 = expectedSHA256
            self.computesSHA256 = computesSHA256
            self.headers = headers
            self.sensitiveHeaderNames = sensitiveHeaderNames
            self.temporaryDirectory = temporaryDirectory
            self.existingFile = existingFile
            self.retry = retry
            self.idleTimeout = idleTimeout
            self.connectTimeout = connectTimeout
            self.deadline = deadline
            self.tls = tls
            self.proxy = proxy
            self.maximumRedirects = maximumRedirects
            self.checkpointing = checkpointing
            self.progressInterval = progressInterval
            self.transport = transport
            self.simulatedWriterBytesPerSecond = getenv(Self.simulatedWriterEnvironmentVariable)
                .flatMap { Int(String(cString: $0)) }.flatMap { $0 > 0 ? $0 : nil }
        }

        /// The defaults: five retries, a 60 s idle timeout, at most 10 redirects, free names on collision.
        public static let `default` = Configuration()
    }
}
