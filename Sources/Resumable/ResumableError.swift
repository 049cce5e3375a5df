import Foundation

/// An error from a download, a resume or a token.
///
/// Errors are a struct wrapping a private code, in the style of AsyncHTTPClient's `HTTPClientError`:
/// new codes can be added without breaking callers. Compare ``code`` against the static members of
/// ``Code`` to react to a particular failure.
///
/// A transient failure (a reset connection, a timeout, a body that ended early, a 5xx) carries the
/// ``resumeToken`` to continue from, the way Apple puts resume data into an error's `userInfo`.
public struct ResumableError: Error, Sendable, CustomStringConvertible, LocalizedError {
    /// What went wrong, as a value that can be compared.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case invalidToken
            case newerTokenVersion
            case tokenInUse
            case tokenGone
            case destinationRequired
            case invalidRequest
            case httpStatus
            case network
            case timedOut
            case incompleteBody
            case protocolViolation
            case redirect
            case fileSystem
            case diskFull
            case destinationExists
            case cancelled
            case checksumMismatch
            case tls
            case proxy
            case paused
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The token is malformed or names something this library must not touch.
        public static let invalidToken = Code(.invalidToken)
        /// The token was written by a newer version of the format than this library reads.
        public static let newerTokenVersion = Code(.newerTokenVersion)
        /// Another task or process holds the token's temporary file.
        public static let tokenInUse = Code(.tokenInUse)
        /// The token's download already finished, or its temporary file is gone.
        public static let tokenGone = Code(.tokenGone)
        /// The token's temporary file is gone, so nothing proves the destination it names is the caller's:
        /// pass a destination to resume.
        public static let destinationRequired = Code(.destinationRequired)
        /// The URL, method or headers of the request cannot be used: a URL that is not absolute http or https, or
        /// is longer than 64 KiB (65,536 bytes of text, a fragment included).
        public static let invalidRequest = Code(.invalidRequest)
        /// The server answered with an error status; see ``ResumableError/httpStatus``.
        public static let httpStatus = Code(.httpStatus)
        /// The connection could not be made (refused, the host name did not resolve) or was lost (reset, closed
        /// without an answer, a send or receive error). Transient.
        public static let network = Code(.network)
        /// No connection within the connect timeout, or the server stopped sending for longer than the idle timeout.
        /// Transient.
        public static let timedOut = Code(.timedOut)
        /// The body ended before the announced length.
        public static let incompleteBody = Code(.incompleteBody)
        /// The server's answer breaks HTTP in a way that makes it unusable.
        public static let protocolViolation = Code(.protocolViolation)
        /// A redirect was refused: too many hops, a loop, or a scheme other than http(s).
        public static let redirect = Code(.redirect)
        /// Reading or writing a file failed.
        public static let fileSystem = Code(.fileSystem)
        /// The file system is full (or the process's file size limit was reached).
        public static let diskFull = Code(.diskFull)
        /// The destination exists and the configuration forbids replacing it.
        public static let destinationExists = Code(.destinationExists)
        /// The task was cancelled.
        public static let cancelled = Code(.cancelled)
        /// The finished file's checksum differs from the expected one.
        public static let checksumMismatch = Code(.checksumMismatch)
        /// A TLS handshake failed: the server's certificate is untrusted, expired or for another host, a pinned key
        /// did not match, or the server required a client certificate. Permanent: never retried.
        public static let tls = Code(.tls)
        /// The proxy could not be reached, refused the request, or failed to open a tunnel. Transient (retried) when
        /// the proxy could not be resolved or reached, or answered the tunnel's `CONNECT` with 408, 429 or a 5xx (then
        /// ``ResumableError/httpStatus`` is that status); permanent when it refused: any other status (403, 407, …),
        /// a refused SOCKS handshake, or a proxy URL that cannot be used.
        public static let proxy = Code(.proxy)
        /// The download was paused (``DownloadTask/cancelProducingResumeData()``, or the task awaiting it was
        /// cancelled); the error carries the ``ResumableError/resumeToken`` when anything was on disk.
        public static let paused = Code(.paused)

        public var description: String { base.rawValue }
    }

    /// What went wrong.
    public let code: Code
    /// A sentence for people, naming the field, header or path at fault.
    public let message: String
    /// The lower-level error that caused this one, if any.
    public let underlying: (any Error & Sendable)?
    /// The HTTP status that caused the error: the server's for ``Code/httpStatus``, the proxy's answer to `CONNECT`
    /// for ``Code/proxy``.
    public let httpStatus: Int?
    /// How long the server asked to wait before retrying (`Retry-After`), if it said.
    public let retryAfter: Duration?
    /// The token to continue from, when the failure left something worth resuming.
    public internal(set) var resumeToken: ResumeToken?
    /// For a ``Code/proxy`` error without a status: whether the proxy could not be reached (transient) rather than
    /// refused (permanent).
    let proxyUnreachable: Bool

    init(
        _ code: Code,
        _ message: String,
        underlying: (any Error & Sendable)? = nil,
        httpStatus: Int? = nil,
        retryAfter: Duration? = nil,
        resumeToken: ResumeToken? = nil,
        proxyTransient: Bool = false
    ) {
        self.code = code
        self.message = message
        self.underlying = underlying
        self.httpStatus = httpStatus
        self.retryAfter = retryAfter
        self.resumeToken = resumeToken
        self.proxyUnreachable = proxyTransient
    }

    /// Whether trying again later may succeed; the only rule the engine retries by, and what the CLI's exit status 75
    /// follows.
    ///
    /// Transient: ``Code/network`` (refused, reset, name not found, an empty reply), ``Code/timedOut`` (connect
    /// timeout, a stall), ``Code/incompleteBody``, ``Code/tokenInUse``, an ``Code/httpStatus`` of 408, 429 or 5xx,
    /// and a ``Code/proxy`` failure where the proxy could not be reached or answered its `CONNECT` with 408, 429 or
    /// 5xx. Everything else is permanent, in particular ``Code/tls`` (an untrusted or expired certificate, a wrong
    /// host name, a refused client certificate), a proxy's refusal, ``Code/invalidRequest``,
    /// ``Code/protocolViolation``, ``Code/redirect``, ``Code/cancelled`` and ``Code/paused``.
    public var isTransient: Bool {
        switch code {
        case .network, .timedOut, .incompleteBody, .tokenInUse:
            return true
        case .httpStatus:
            guard let status = httpStatus else { return false }
            return Self.isTransientStatus(status)
        case .proxy:
            guard let status = httpStatus else { return proxyUnreachable }
            return Self.isTransientStatus(status)
        default:
            return false
        }
    }

    /// 408 Request Timeout, 429 Too Many Requests and every 5xx.
    static func isTransientStatus(_ status: Int) -> Bool {
        status == 408 || status == 429 || (500...599).contains(status)
    }

    public var description: String {
        var text = "\(code): \(message)"
        if let underlying {
            text += " (\(underlying))"
        }
        return text
    }
}

extension ResumableError {
    /// ``message``: the sentence people should read, so `localizedDescription` is not Foundation's generic "The
    /// operation could not be completed".
    public var errorDescription: String? { message }

    /// What kind of failure this is, in one sentence.
    public var failureReason: String? {
        switch code {
        case .invalidToken: return "The resume token is malformed or names something it must not."
        case .newerTokenVersion: return "The resume token was written by a newer version of Resumable."
        case .tokenInUse: return "Another download holds the token's temporary file."
        case .tokenGone: return "The token's download already finished, or its temporary file is gone."
        case .destinationRequired: return "The token's temporary file is gone, so its destination cannot be trusted."
        case .invalidRequest: return "The request cannot be made."
        case .httpStatus: return httpStatus.map { "The server answered with status \($0)." } ?? "The server refused."
        case .network: return "The connection failed."
        case .timedOut: return "The connection timed out."
        case .incompleteBody: return "The body ended before its announced end."
        case .protocolViolation: return "The server's answer is not valid HTTP."
        case .redirect: return "A redirect was refused."
        case .fileSystem: return "A file operation failed."
        case .diskFull: return "The disk is full."
        case .destinationExists: return "The destination exists."
        case .cancelled: return "The download was cancelled."
        case .checksumMismatch: return "The file's SHA-256 differs from the expected one."
        case .tls: return "The TLS handshake failed."
        case .proxy:
            if let httpStatus { return "The proxy answered with status \(httpStatus)." }
            return isTransient ? "The proxy could not be reached." : "The proxy refused the request."
        case .paused: return "The download was paused."
        default: return nil
        }
    }

    /// What to do about it, where there is something to do.
    public var recoverySuggestion: String? {
        let resume = resumeToken == nil ? "" : " Resume from the token to keep the bytes already downloaded."
        switch code {
        case .tls:
            return "Check the server's certificate and host name. To trust a private CA, pass it with --cacert FILE "
                + "(Configuration.tls)."
        case .proxy where !isTransient:
            return "Check the proxy and its credentials (--proxy, --noproxy, Configuration.proxy, or the http_proxy, "
                + "HTTPS_PROXY, ALL_PROXY and NO_PROXY environment variables)."
        case .tokenInUse: return "Wait for the other download to end, or stop it."
        case .newerTokenVersion: return "Resume with a newer version of Resumable."
        case .tokenGone: return "Start the download again."
        case .destinationRequired: return "Pass the destination to resume into."
        case .destinationExists: return "Choose another destination, or allow replacing the file."
        case .checksumMismatch: return "Check the expected SHA-256 and the source; the file was not kept."
        case .diskFull: return "Free some space, then try again." + resume
        case .paused: return resumeToken == nil ? nil : "Resume from the token to continue where it stopped."
        default:
            return isTransient ? "Try again later." + resume : nil
        }
    }
}

extension ResumableError {
    static func invalidToken(field: String, _ reason: String) -> ResumableError {
        ResumableError(.invalidToken, "resume token field '\(field)' \(reason)")
    }

    package static func fileSystem(_ operation: String, path: String, errno code: Int32) -> ResumableError {
        let reason = String(cString: strerror(code))
        if code == ENOSPC || code == EFBIG || code == EDQUOT {
            return ResumableError(
                .diskFull, "\(operation) '\(path)' failed: \(reason)",
                underlying: POSIXErrorCode(rawValue: code).map { POSIXError($0) })
        }
        return ResumableError(
            .fileSystem, "\(operation) '\(path)' failed: \(reason)",
            underlying: POSIXErrorCode(rawValue: code).map { POSIXError($0) })
    }
}
