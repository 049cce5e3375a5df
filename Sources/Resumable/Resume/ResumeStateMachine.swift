import Foundation

/// Every decision a resuming download makes, as a pure value type with no I/O.
///
/// This is where the rules of `docs/protocol-rules.md` (RFC 9110 ranges and validators) live:
/// - ``nextRequest()`` says what to send: `Range: bytes=N-` from the bytes safely on disk, `If-Range` with a
///   strong validator only, `Accept-Encoding: identity`, credentials only to the original origin.
/// - ``receive(_:)`` judges a response head before a single byte of its body is written: join a 206 only
///   when it starts exactly at the offset under unchanged validators, restart on a 200, finish on a 416
///   that proves the file complete, follow redirects, classify errors as transient or permanent.
/// - ``receiveBody(count:)`` and ``responseEnded(error:)`` account for the body and decide whether the
///   download is finished, must continue with another range request, or must be retried.
///
/// The engine (``DownloadEngine``) performs what this machine decides; its tests drive it with
/// hand-written heads, without a network.
struct ResumeStateMachine: Sendable {
    /// What to send next.
    struct Request: Hashable, Sendable {
        var url: URL
        var headers: [HTTPHeader]
        /// The byte the body will be written from; the temporary file is cut to this length first.
        var offset: Int64
    }

    /// Why the download started again from byte 0.
    enum RestartReason: Hashable, Sendable, CustomStringConvertible {
        /// The server sent the whole representation (200): it ignored the range, or `If-Range` failed.
        case wholeRepresentation
        /// The validators changed: the file on the server is not the one on disk.
        case representationChanged
        /// A 206 started elsewhere than the offset, or its `Content-Range` was unusable.
        case unjoinablePartial(String)
        /// A 416 said the file is not the size on disk, or said nothing usable.
        case unsatisfiableRange(String)
        /// Nothing proves the server's bytes are the ones on disk (no validators to check).
        case noValidators
        /// The response was content-encoded, so byte offsets cannot be trusted.
        case contentEncoded

        var description: String {
            switch self {
            case .wholeRepresentation: return "the server sent the whole file instead of the requested range"
            case .representationChanged: return "the file changed on the server"
            case .unjoinablePartial(let why): return "the partial answer cannot be joined: \(why)"
            case .unsatisfiableRange(let why): return "the server refused the range: \(why)"
            case .noValidators:
                return
                    "the server gives no strong validator (a strong ETag, or a Last-Modified older than its Date) to join safely"
            case .contentEncoded: return "the answer is content-encoded, so it cannot be resumed"
            }
        }
    }

    /// What to do with a response head.
    enum HeadDecision: Sendable {
        /// Write the body at ``ResumeStateMachine/offset``. `restarted` is set when the bytes on disk were
        /// dropped for this body; `resumedAt` is the offset the body joins at.
        case writeBody(resumedAt: Int64, restarted: RestartReason?)
        /// Do not read the body; then do what the outcome says.
        case skipBody(Outcome)
    }

    /// What to do once a response is over.
    enum Outcome: Sendable {
        /// The file is complete: bytes on disk equal the whole representation.
        case finished
        /// Send ``nextRequest()`` at once: a redirect, a short 206, or a restart.
        case requestAgain
        /// A transient failure: send ``nextRequest()`` again after a backoff, if retries are left.
        case retry(ResumableError)
        /// A permanent failure.
        case fail(ResumableError)
    }

    /// The validators the bytes on disk were received under, exactly as received.
    struct Validators: Hashable, Sendable {
        var etag: String?
        var lastModified: String?
        var responseDate: String?

        /// The value for `If-Range`: a strong entity tag, or else a strong Last-Modified date (RFC 9110
        /// §13.1.5, §8.8.2.2); `nil` when neither is usable.
        var ifRange: String? {
            if let etag {
                guard let tag = EntityTag(etag), !tag.isWeak else { return nil }
                return etag
            }
            guard let lastModified, let modified = HTTPDate.parse(lastModified),
                let dateHeader = responseDate, let date = HTTPDate.parse(dateHeader),
                date.timeIntervalSince(modified) >= 1
            else { return nil }
            return lastModified
        }
    }

    /// The exchange in flight: what was asked and where its body must end.
    private struct Exchange: Sendable {
        var sentRange: Bool
        var sentIfRange: Bool
        var isPartial = false
        /// The offset one past the last body byte the answer announced; `nil` when unknown.
        var bodyEnd: Int64?
        var bodyAccepted = false
    }

    private(set) var url: URL
    let originalURL: URL
    private(set) var offset: Int64
    private(set) var expectedLength: Int64?
    private(set) var validators: Validators
    private(set) var acceptRanges: String?
    private(set) var suggestedFilename: String
    private var hasNameFromResponse = false
    /// `false` once a content-encoded answer was accepted: offsets then count decoded bytes.
    private(set) var isResumable = true
    /// The status of the last response whose body was accepted.
    private(set) var lastStatus: Int?
    private let headers: [HTTPHeader]
    private let maximumRedirects: Int
    private var redirectChain: [URL] = []
    private var exchange: Exchange?
    private var triedOriginalURL = false
    /// Restarts from byte 0 in this run; bounded so a server that changes on every request cannot loop.
    private(set) var restarts = 0
    static let maximumRestarts = 10
    /// Sent unless the caller's headers name another one, so servers can tell who is asking.
    static let userAgent = "Resumable/1"

    /// A machine for a new download of `url`.
    init(url: URL, headers: [HTTPHeader], maximumRedirects: Int) {
        self.url = url
        self.originalURL = url
        self.offset = 0
        self.expectedLength = nil
        self.validators = Validators()
        self.suggestedFilename = SuggestedFilename.choose(contentDisposition: nil, url: url)
        self.headers = headers
        self.maximumRedirects = maximumRedirects
    }

    /// A machine that continues from a token, whose temporary file holds `bytesOnDisk` bytes.
    ///
    /// The offset is the smaller of the token's and the file's: a lost tail is downloaded again, and bytes
    /// beyond the token's offset are not trusted (the engine cuts them off before the next request).
    init(token: ResumeToken, bytesOnDisk: Int64, replacingURL: URL?, headers: [HTTPHeader], maximumRedirects: Int) {
        self.url = replacingURL ?? token.url
        self.originalURL = replacingURL ?? token.originalURL
        self.offset = min(token.offset, bytesOnDisk)
        self.expectedLength = token.expectedLength
        self.validators = Validators(
            etag: token.etag,
            lastModified: token.lastModified,
            responseDate: token.responseDate
        )
        self.acceptRanges = token.acceptRanges
        self.suggestedFilename = token.suggestedFilename
        self.hasNameFromResponse = true
        self.headers = headers
        self.maximumRedirects = maximumRedirects
    }

    // MARK: - Requests

    /// The request to send next. Drops the bytes on disk first when nothing could prove a join safe.
    mutating func nextRequest() -> Request {
        if offset > 0 && (!isResumable || validators.ifRange == nil) {
            // Pieces may only be joined under a strong validator the server checks (RFC 9110 §13.1.5,
            // §15.3.7.3). A weak ETag, or a Last-Modified too close to its Date, cannot prove the bytes on
            // disk are the server's: start again rather than risk a splice.
            unreportedRestart = isResumable ? .noValidators : .contentEncoded
            offset = 0
        }
        var fields = [HTTPHeader(name: "Accept-Encoding", value: "identity")]
        if !headers.contains(where: { $0.name.caseInsensitiveCompare("User-Agent") == .orderedSame }) {
            fields.append(HTTPHeader(name: "User-Agent", value: Self.userAgent))
        }
        let crossOrigin = HTTPURL.origin(of: url) != HTTPURL.origin(of: originalURL)
        for header in headers where !(crossOrigin && SensitiveHeaders.contains(header.name)) {
            if header.name.caseInsensitiveCompare("Accept-Encoding") == .orderedSame { continue }
            if header.name.caseInsensitiveCompare("Range") == .orderedSame { continue }
            if header.name.caseInsensitiveCompare("If-Range") == .orderedSame { continue }
            fields.append(header)
        }
        var current = Exchange(sentRange: false, sentIfRange: false)
        if offset > 0 {
            fields.append(HTTPHeader(name: "Range", value: "bytes=\(offset)-"))
            current.sentRange = true
            if let ifRange = validators.ifRange {
                fields.append(HTTPHeader(name: "If-Range", value: ifRange))
                current.sentIfRange = true
            }
        }
        exchange = current
        return Request(url: url, headers: fields, offset: offset)
    }

    // MARK: - Response heads

    /// Judges a response head. Nothing of the body may be written unless this returns `.writeBody`.
    mutating func receive(_ head: ResponseHead) -> HeadDecision {
        guard let current = exchange else {
            return .skipBody(.fail(ResumableError(.protocolViolation, "a response arrived without a request")))
        }
        let status = head.status
        if [301, 302, 303, 307, 308].contains(status) {
            return .skipBody(redirect(head))
        }
        redirectChain.removeAll()
        switch status {
        case 206:
            return receivePartial(head, current)
        case 200...299:
            return receiveWhole(head, current)
        case 416:
            return .skipBody(receiveUnsatisfiable(head, current))
        case 408, 429, 500...599:
            let retryAfter = head.value("Retry-After").flatMap { RetryAfter.delay($0, now: Date()) }
            let error = ResumableError(
                .httpStatus,
                "the server answered \(status) \(Self.reason(status)); it may succeed later",
                httpStatus: status,
                retryAfter: retryAfter
            )
            return .skipBody(.retry(error))
        default:
            if [403, 404, 410].contains(status), url != originalURL, !triedOriginalURL {
                // The resumed URL may have expired (signed URLs); the validators still guard the content.
                triedOriginalURL = true
                url = originalURL
                return .skipBody(.requestAgain)
            }
            let error = ResumableError(
                .httpStatus,
                "the server answered \(status) \(Self.reason(status)) for \(url.absoluteString)",
                httpStatus: status
            )
            return .skipBody(.fail(error))
        }
    }

    private mutating func redirect(_ head: ResponseHead) -> Outcome {
        guard let location = head.value("Location"), let target = URL(string: location, relativeTo: url)?.absoluteURL
        else {
            return .fail(ResumableError(.redirect, "a \(head.status) redirect without a usable Location header"))
        }
        guard HTTPURL.isSupported(target) else {
            return .fail(ResumableError(.redirect, "refusing a redirect to \(target.absoluteString): http(s) only"))
        }
        redirectChain.append(url)
        guard redirectChain.count <= maximumRedirects else {
            return .fail(ResumableError(.redirect, "more than \(maximumRedirects) redirects"))
        }
        // A URL may redirect to itself once (to set state); a third visit is a loop.
        guard redirectChain.filter({ $0 == target }).count < 2 else {
            return .fail(ResumableError(.redirect, "redirect loop at \(target.absoluteString)"))
        }
        url = target
        return .requestAgain
    }

    private mutating func receivePartial(_ head: ResponseHead, _ current: Exchange) -> HeadDecision {
        let requestedFrom = current.sentRange ? offset : 0
        if head.value("Content-Type")?.lowercased().hasPrefix("multipart/byteranges") == true {
            return restartOrFail(.unjoinablePartial("multipart/byteranges answer to a single range"), current)
        }
        if let encoding = Self.contentEncoding(head) {
            return restartOrFail(.unjoinablePartial("Content-Encoding \(encoding)"), current)
        }
        guard let header = head.value("Content-Range") else {
            return restartOrFail(.unjoinablePartial("no Content-Range"), current)
        }
        guard let contentRange = ContentRange(header),
            case .satisfied(let first, let last, let complete) = contentRange.value
        else {
            return restartOrFail(.unjoinablePartial("malformed Content-Range \(header.debugDescription)"), current)
        }
        guard first == requestedFrom else {
            return restartOrFail(
                .unjoinablePartial("it starts at \(first), the file on disk ends at \(requestedFrom)"),
                current
            )
        }
        if let complete, let expectedLength, complete != expectedLength, requestedFrom > 0 {
            return restartOrFail(.representationChanged, current)
        }
        if let declared = head.value("Content-Length") {
            guard let length = Self.decimal(declared), length == last - first + 1 else {
                return restartOrFail(.unjoinablePartial("Content-Length \(declared) disagrees with \(header)"), current)
            }
        }
        if requestedFrom > 0 && !joinable(head, sentIfRange: current.sentIfRange) {
            return restartOrFail(.representationChanged, current)
        }
        if requestedFrom == 0 {
            adoptValidators(head)
        }
        expectedLength = complete ?? expectedLength
        acceptRanges = head.value("Accept-Ranges") ?? acceptRanges
        lastStatus = 206
        exchange = Exchange(
            sentRange: current.sentRange,
            sentIfRange: current.sentIfRange,
            isPartial: true,
            bodyEnd: last + 1,
            bodyAccepted: true
        )
        return .writeBody(resumedAt: offset, restarted: nil)
    }

    /// Whether a 206's validators prove it is the representation on disk (RFC 9110 §15.3.7.3): the server
    /// checked a strong validator (`If-Range`), and whatever validators the 206 carries are the stored ones.
    private func joinable(_ head: ResponseHead, sentIfRange: Bool) -> Bool {
        guard sentIfRange else { return false }
        if let etag = head.value("ETag"), etag != validators.etag { return false }
        if let lastModified = head.value("Last-Modified"), lastModified != validators.lastModified { return false }
        return true
    }

    private mutating func receiveWhole(_ head: ResponseHead, _ current: Exchange) -> HeadDecision {
        let encoding = Self.contentEncoding(head)
        var length: Int64?
        if encoding == nil, let declared = head.value("Content-Length") {
            guard let parsed = Self.decimal(declared) else {
                let error = ResumableError(.protocolViolation, "malformed Content-Length \(declared.debugDescription)")
                return .skipBody(.fail(error))
            }
            length = parsed
        }
        var reason = unreportedRestart
        unreportedRestart = nil
        if offset > 0 {
            let previous = validators
            adoptValidators(head)
            if encoding != nil {
                reason = .contentEncoded
            } else if previous.etag != validators.etag || previous.lastModified != validators.lastModified {
                reason = .representationChanged
            } else {
                reason = .wholeRepresentation
            }
            restarts += 1
            guard restarts <= Self.maximumRestarts else {
                return .skipBody(.fail(restartLimitError()))
            }
        } else {
            adoptValidators(head)
        }
        isResumable = encoding == nil
        expectedLength = length
        acceptRanges = head.value("Accept-Ranges")
        offset = 0
        lastStatus = head.status
        exchange = Exchange(
            sentRange: current.sentRange,
            sentIfRange: current.sentIfRange,
            isPartial: false,
            bodyEnd: length,
            bodyAccepted: true
        )
        return .writeBody(resumedAt: 0, restarted: reason)
    }

    private mutating func receiveUnsatisfiable(_ head: ResponseHead, _ current: Exchange) -> Outcome {
        guard current.sentRange else {
            return .fail(ResumableError(.protocolViolation, "416 to a request without a range", httpStatus: 416))
        }
        guard let header = head.value("Content-Range"), let contentRange = ContentRange(header),
            case .unsatisfied(let completeLength) = contentRange.value
        else {
            // Ambiguous (RFC 9110 §15.5.17): do not guess the file is complete; fetch it again.
            return restart(.unsatisfiableRange("416 without a usable Content-Range"))
        }
        let etag = head.value("ETag")
        let lastModified = head.value("Last-Modified")
        let unchanged =
            (etag == nil || etag == validators.etag)
            && (lastModified == nil || lastModified == validators.lastModified)
        guard completeLength == offset, unchanged, expectedLength == nil || expectedLength == completeLength else {
            return restart(.unsatisfiableRange("the file on the server has \(completeLength) bytes, not \(offset)"))
        }
        expectedLength = completeLength
        lastStatus = 416
        exchange = nil
        return .finished
    }

    private mutating func restartOrFail(_ reason: RestartReason, _ current: Exchange) -> HeadDecision {
        guard current.sentRange else {
            // Nothing was asked for but the whole: a 206 that cannot be used is a broken server.
            let error = ResumableError(.protocolViolation, "unusable 206 to a request without a range: \(reason)")
            return .skipBody(.fail(error))
        }
        return .skipBody(restart(reason))
    }

    private mutating func restart(_ reason: RestartReason) -> Outcome {
        restarts += 1
        guard restarts <= Self.maximumRestarts else { return .fail(restartLimitError()) }
        offset = 0
        expectedLength = nil
        validators = Validators()
        lastRestart = reason
        exchange = nil
        return .requestAgain
    }

    /// The reason for the last restart decided while skipping a body, for progress reports.
    private(set) var lastRestart: RestartReason?
    /// A restart decided in ``nextRequest()`` (the bytes on disk could not be joined safely), reported with
    /// the next accepted body.
    private var unreportedRestart: RestartReason?

    private func restartLimitError() -> ResumableError {
        ResumableError(
            .protocolViolation,
            "gave up after \(Self.maximumRestarts) restarts: the server's answers never fit together"
        )
    }

    private mutating func adoptValidators(_ head: ResponseHead) {
        let etag = head.value("ETag").flatMap { EntityTag($0) != nil ? $0 : nil }
        let lastModified = head.value("Last-Modified").flatMap { HTTPFieldSyntax.isValidValue($0) ? $0 : nil }
        let date = head.value("Date").flatMap { HTTPFieldSyntax.isValidValue($0) ? $0 : nil }
        validators = Validators(etag: etag, lastModified: lastModified, responseDate: date)
        if !hasNameFromResponse {
            // The first response names the file (after redirects); later ones need not repeat it (§15.3.7).
            suggestedFilename = SuggestedFilename.choose(
                contentDisposition: head.value("Content-Disposition"), url: url)
            hasNameFromResponse = true
        }
    }

    // MARK: - Bodies

    /// Accounts for `count` body bytes about to be written at ``offset``.
    ///
    /// Throws when the body runs past what its head announced: those bytes must never reach the file.
    mutating func receiveBody(count: Int) throws(ResumableError) {
        guard let current = exchange, current.bodyAccepted else {
            throw ResumableError(.protocolViolation, "body bytes without an accepted response")
        }
        let end = offset + Int64(count)
        if let bodyEnd = current.bodyEnd, end > bodyEnd {
            throw ResumableError(
                .protocolViolation,
                "the body runs past its announced end (\(bodyEnd) bytes); the extra bytes were not written"
            )
        }
        offset = end
    }

    /// Takes back body bytes that could not be written: the offset is where the failed write began.
    mutating func revertBody(to position: Int64) {
        offset = min(offset, position)
    }

    /// Decides what follows a response whose body was accepted, given how the transfer ended.
    mutating func responseEnded(error: ResumableError?) -> Outcome {
        guard let current = exchange, current.bodyAccepted else {
            return .retry(error ?? ResumableError(.network, "the connection closed before a response arrived"))
        }
        exchange = nil
        if let error {
            return error.isTransient ? .retry(error) : .fail(error)
        }
        if let bodyEnd = current.bodyEnd, offset < bodyEnd {
            return .retry(
                ResumableError(.incompleteBody, "the body ended after \(offset) of \(bodyEnd) bytes")
            )
        }
        if current.isPartial {
            // A 206 may cover less than asked (RFC 9110 §15.3.7): ask for the rest.
            if let expectedLength, offset < expectedLength { return .requestAgain }
            if expectedLength == nil { return .requestAgain }
            return .finished
        }
        if let expectedLength, offset != expectedLength {
            return .retry(ResumableError(.incompleteBody, "the body ended after \(offset) of \(expectedLength) bytes"))
        }
        expectedLength = offset
        return .finished
    }

    /// Drops the bytes on disk (after a transient failure of a download that cannot be resumed).
    mutating func discardProgress() {
        offset = 0
    }

    // MARK: - Helpers

    private static func contentEncoding(_ head: ResponseHead) -> String? {
        let encodings = head.values("Content-Encoding")
            .flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            .filter { !$0.isEmpty && $0 != "identity" }
        return encodings.isEmpty ? nil : encodings.joined(separator: ", ")
    }

    static func reason(_ status: Int) -> String {
        ReasonPhrase.for(status)
    }

    /// A decimal header value such as `Content-Length`: digits only (no sign), no overflow.
    private static func decimal(_ value: String) -> Int64? {
        HTTPSyntax.parseDigits(HTTPSyntax.trimmedBytes(value))
    }
}

/// Reason phrases for the statuses a download meets.
enum ReasonPhrase {
    static func `for`(_ status: Int) -> String {
        switch status {
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 408: return "Request Timeout"
        case 410: return "Gone"
        case 416: return "Range Not Satisfiable"
        case 429: return "Too Many Requests"
        case 500: return "Internal Server Error"
        case 502: return "Bad Gateway"
        case 503: return "Service Unavailable"
        case 504: return "Gateway Timeout"
        default: return ""
        }
    }
}
