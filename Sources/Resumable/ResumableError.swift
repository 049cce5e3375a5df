import Foundation

/// An error from a download, a resume or a token.
///
/// Errors are a struct wrapping a private code, in the style of AsyncHTTPClient's `HTTPClientError`:
/// new codes can be added without breaking callers. Compare ``code`` against the static members of
/// ``Code`` to react to a particular failure.
///
/// A transient failure (a reset connection, a timeout, a body that ended early, a 5xx) carries the
/// ``resumeToken`` to continue from, the way Apple puts resume data into an error's `userInfo`.
public struct ResumableError: Error, Sendable, CustomStringConvertible {
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
        /// The URL, method or headers of the request cannot be used.
        public static let invalidRequest = Code(.invalidRequest)
        /// The server answered with an error status; see ``ResumableError/httpStatus``.
        public static let httpStatus = Code(.httpStatus)
        /// The connection failed or was reset.
        public static let network = Code(.network)
        /// The server stopped sending for longer than the configured timeout.
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
        /// The proxy could not be reached, refused the request, or failed to open a tunnel.
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
    /// The HTTP status that caused the error, for ``Code/httpStatus``.
    public let httpStatus: Int?
    /// How long the server asked to wait before retrying (`Retry-After`), if it said.
    public let retryAfter: Duration?
    /// The token to continue from, when the failure left something worth resuming.
    public internal(set) var resumeToken: ResumeToken?

    init(
        _ code: Code,
        _ message: String,
        underlying: (any Error & Sendable)? = nil,
        httpStatus: Int? = nil,
        retryAfter: Duration? = nil,
        resumeToken: ResumeToken? = nil
    ) {
        self.code = code
        self.message = message
        self.underlying = underlying
        self.httpStatus = httpStatus
        self.retryAfter = retryAfter
        self.resumeToken = resumeToken
    }

    /// Whether trying again later may succeed: network failures, timeouts, early ends, 5xx, 408 and 429.
    public var isTransient: Bool {
        switch code {
        case .network, .timedOut, .incompleteBody, .tokenInUse:
            return true
        case .httpStatus:
            guard let status = httpStatus else { return false }
            return status == 408 || status == 429 || (500...599).contains(status)
        default:
            return false
        }
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
    static func invalidToken(field: String, _ reason: String) -> ResumableError {
        ResumableError(.invalidToken, "resume token field '\(field)' \(reason)")
    }

    static func fileSystem(_ operation: String, path: String, errno code: Int32) -> ResumableError {
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
