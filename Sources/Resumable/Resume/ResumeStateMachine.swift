import Foundation

/// Every decision a resuming download makes, as a pure value type with no I/O.
///
/// This is where the rules of `docs/protocol-rules.md` (RFC 9110 ranges and validators) live. Each mutating
/// method returns what its owner (``DownloadEngine``) must do, in the style of async-http-client's
/// `Transaction.StateMachine`; the engine performs those actions and decides nothing itself.
/// - ``nextRequest()`` says what to send: `Range: bytes=N-` from the bytes safely on disk, `If-Range` with a
///   strong validator only, `Accept-Encoding: identity`, credentials only to the original origin; and whether
///   the bytes on disk must be dropped first (``RequestPlan/newFile``).
/// - ``receive(_:)`` judges a response head before a single byte of its body is written: join a 206 only
///   when it starts exactly at the offset under unchanged validators, restart on a 200, finish on a 416
///   that proves the file complete, follow redirects, classify errors as transient or permanent.
/// - ``receiveBody(count:)`` and ``responseEnded(error:)`` account for the body and decide whether the
///   download is finished, must continue with another range request, or must be retried.
///
/// **Dropping bytes never reuses the file.** Whenever the offset goes back to 0 with bytes on disk, the
/// action says `newFile`: the engine writes the new version into a new temporary file and switches the
/// token to it, durably, before the old file goes. So at every instant the token on disk describes a prefix
/// of the file it names (`docs/reliability.md`).
struct ResumeStateMachine: Sendable {
    /// What to send next.
    struct Request: Hashable, Sendable {
        var url: URL
        var headers: [HTTPHeader]
        /// The byte the body will be written from; bytes beyond it in the temporary file are not trusted.
        var offset: Int64
    }

    /// A request, and what must happen to the temporary file before it is sent.
    struct RequestPlan: Sendable {
        var request: Request
        /// Bytes of the temporary file at or beyond this are not trusted: cut them off before sending. The offset,
        /// or the end of the last completed range of a multi-connection download.
        var trustedLength: Int64
        /// Set when the bytes on disk were dropped: start a new empty temporary file and switch the token to
        /// it before sending.
        var newFile: RestartReason?
    }

    /// What to do with a response head.
    enum HeadAction: Sendable {
        /// Write the body.
        case writeBody(BodyPlan)
        /// Do not read the body; then do what the outcome says.
        case skipBody(Outcome)
    }

    /// How an accepted body is written.
    struct BodyPlan: Sendable {
        /// Where its first byte goes.
        var offset: Int64
        /// Set when the body is a new version: start a new empty temporary file, switch the token to it, and
        /// only then write.
        var newFile: RestartReason?
        /// The event that reports the accepted response.
        var event: DownloadEvent
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

    /// The exchange in flight: what was asked and where its body must end.
    private struct Exchange: Sendable {
        var sentRange: Bool
        var sentIfRange: Bool
        /// The strong entity tag a 206 must carry to be joined, when the server is known to ignore entity-tag
        /// `If-Range`s (``ignoresEntityTagIfRange``).
        var requiredETag: String?
        var isPartial = false
        /// The offset one past the last body byte the answer announced; `nil` when unknown.
        var bodyEnd: Int64?
        var bodyAccepted = false
        /// The answer goes on past `bodyEnd` (into a completed range): the transfer stops at `bodyEnd`.
        var stopsBeforeItsEnd = false
    }

    /// The resume state; changed only here.
    private(set) var state: ResumeState
    /// The status of the last response whose body was accepted (or the 416 that proved the file complete).
    private(set) var lastStatus: Int?
    /// The head of the last response whose body was accepted; a 416 that proved the file complete carries none of
    /// the file's headers, so it does not replace it.
    private(set) var finalHead: ResponseHead?
    /// Restarts from byte 0 in this run; bounded so a server that changes on every request cannot loop.
    private(set) var restarts = 0
    static let maximumRestarts = 10
    /// Sent unless the caller's headers name another one, so servers can tell who is asking.
    static let userAgent = "Resumable/1"

    private var redirects: RedirectState
    private var exchange: Exchange?
    private var triedOriginalURL = false
    /// Bytes on disk were dropped: the next request starts in a new temporary file.
    private var droppedBytes: RestartReason?
    /// The server answered an entity-tag `If-Range` with a 200 carrying that same strong entity tag: it honors
    /// only dates there (some CDNs do). Remembered for the rest of this task; see ``receive(_:)``.
    private(set) var ignoresEntityTagIfRange = false
    /// A multi-connection phase found the server's answers to segments unusable: one connection from then on.
    private var segmentsRefused = false
    /// A segment's 206 carried no validator, or not the stored ones (``judgeSegment(_:requested:)``): such a server's
    /// 206s are never joined (``receivePartial(_:_:)`` asks every 206 for the stored validators), so no segments are
    /// tried again in this task; what is missing comes in one piece.
    private(set) var partialsNeedValidators = false
    /// This run's request without a range (the first GET, or a restart's) had its 200 accepted: the server serves
    /// the whole file to this client.
    private var servedWholeWithoutRange = false
    /// A range request was turned away (a 400 or a 403, or an answer too malformed to judge)
    /// by a server that served the whole file without a range in this run: the next request asks without a range and
    /// takes the whole file again (rule 17i, ``turnedAway(_:)``); the rest of the task stays on one connection.
    private(set) var rangesTurnedAway = false
    /// The completed ranges before the last body piece joined them to the prefix, so a failed write can give them
    /// back (``revertBody(to:)``).
    private var absorbedRanges: ByteRangeSet?

    init(state: ResumeState, maximumRedirects: Int) {
        self.state = state
        self.redirects = RedirectState(maximum: maximumRedirects)
    }

    // MARK: - Requests

    /// The request to send next. Drops the bytes on disk first when nothing could prove a join safe.
    mutating func nextRequest() -> RequestPlan {
        // On a server that ignores entity-tag If-Ranges, the strong ETag is checked on the 206 itself instead; the
        // If-Range is a strong date when there is one, else left out (RFC 9110 §15.3.7.3 allows the client to
        // combine two responses that carry the same strong validator).
        let ifRange = ignoresEntityTagIfRange ? state.validators.strongLastModified : state.validators.ifRange
        let requiredETag = ignoresEntityTagIfRange ? state.validators.strongETag : nil
        if state.bytesOnDisk > 0 && ifRange == nil && requiredETag == nil {
            // Pieces may only be joined under a strong validator the server checks (RFC 9110 §13.1.5,
            // §15.3.7.3). A weak ETag, or a Last-Modified too close to its Date, cannot prove the bytes on
            // disk are the server's: start again rather than risk a splice.
            dropBytes(.noValidators)
        }
        let newFile = droppedBytes
        droppedBytes = nil
        var fields = baseHeaders()
        var current = Exchange(sentRange: false, sentIfRange: false)
        // After ranges were turned away, the whole file again: its 200 is judged as any (a restart from byte 0 into a
        // new file; the bytes on disk stay until that answer is accepted).
        if state.bytesOnDisk > 0 && !rangesTurnedAway {
            // With completed ranges beyond the prefix (a multi-connection download's), only the first gap is asked.
            let last = state.completedRanges.ranges.first.map { "\($0.lowerBound - 1)" } ?? ""
            fields.append(HTTPHeader(name: "Range", value: "bytes=\(state.offset)-\(last)"))
            current.sentRange = true
            if let ifRange {
                fields.append(HTTPHeader(name: "If-Range", value: ifRange))
                current.sentIfRange = true
            }
            current.requiredETag = requiredETag
        }
        exchange = current
        return RequestPlan(
            request: Request(url: state.url, headers: fields, offset: state.offset),
            trustedLength: state.completedRanges.ranges.last?.upperBound ?? state.offset,
            newFile: newFile)
    }

    /// The headers of every request: identity coding, a User-Agent, and the caller's headers (credentials only to
    /// the original origin), never the caller's `Range`, `If-Range` or `Accept-Encoding`.
    private func baseHeaders() -> [HTTPHeader] {
        var fields = [HTTPHeader(name: "Accept-Encoding", value: "identity")]
        if !state.headers.contains(where: { Self.named($0, "User-Agent") }) {
            fields.append(HTTPHeader(name: "User-Agent", value: Self.userAgent))
        }
        let crossOrigin = HTTPURL.origin(of: state.url) != HTTPURL.origin(of: state.originalURL)
        for header in state.headers where !(crossOrigin && state.isSensitive(header.name)) {
            if ["Accept-Encoding", "Range", "If-Range"].contains(where: { Self.named(header, $0) }) { continue }
            fields.append(header)
        }
        return fields
    }

    /// The engine started the new temporary file an action asked for.
    mutating func switchedFile(to path: String) {
        state.tempPath = path
    }

    // MARK: - Response heads

    /// Judges a response head. Nothing of the body may be written unless this returns `.writeBody`.
    mutating func receive(_ head: ResponseHead) -> HeadAction {
        guard let current = exchange else {
            return .skipBody(.fail(ResumableError(.protocolViolation, "a response arrived without a request")))
        }
        let status = head.status
        if [301, 302, 303, 307, 308].contains(status) {
            switch redirects.follow(from: state.url, status: status, location: head.value("Location")) {
            case .success(let target):
                state.url = target
                return .skipBody(.requestAgain)
            case .failure(let error):
                return .skipBody(.fail(error))
            }
        }
        redirects.reset()
        switch status {
        case 206:
            return receivePartial(head, current)
        case 200, 203:
            // Only these carry the whole representation (RFC 9110 §15.3.1, §15.3.4).
            return receiveWhole(head, current)
        case 416:
            return .skipBody(receiveUnsatisfiable(head, current))
        case 407:
            // Only a proxy sends 407 (RFC 9110 §15.5.8): the proxy in the way wants credentials, whatever the server.
            let error = ResumableError(
                .proxy,
                "the proxy requires authentication (407 Proxy Authentication Required); give it credentials",
                httpStatus: 407
            )
            return .skipBody(.fail(error))
        case 408, 429, 500...599:
            let retryAfter = head.value("Retry-After").flatMap { RetryAfter.delay($0, now: Date()) }
            let error = ResumableError(
                .httpStatus,
                "the server answered \(status) \(Self.reason(status)); it may succeed later",
                httpStatus: status,
                retryAfter: retryAfter
            )
            return .skipBody(.retry(error))
        case let status where [403, 404, 410].contains(status) && state.url != state.originalURL && !triedOriginalURL:
            // The resumed URL may have expired (signed URLs); the validators still guard the content.
            triedOriginalURL = true
            state.url = state.originalURL
            return .skipBody(.requestAgain)
        default:
            // 400 and 403: a refusal of the request, not news of the file (a 404 or a 410 says it is gone).
            if status == 400 || status == 403, let outcome = turnedAway(current) { return .skipBody(outcome) }
            let what = (200...299).contains(status) ? ", which does not carry the file" : ""
            let error = ResumableError(
                .httpStatus,
                "the server answered \(status) \(Self.reason(status))\(what) for \(state.url.absoluteString)",
                httpStatus: status
            )
            return .skipBody(.fail(error))
        }
    }

    private mutating func receivePartial(_ head: ResponseHead, _ current: Exchange) -> HeadAction {
        let requestedFrom = current.sentRange ? state.offset : 0
        guard current.sentRange || state.bytesOnDisk == 0 else {
            // A 206 to rule 17i's request without a range, with bytes on disk: its body starts at byte 0, the file
            // on disk does not end there, and this answer is no whole file to start again with (a server that sends
            // 206s unasked may cut them anywhere). Fail; the bytes on disk stay described.
            let error = ResumableError(
                .protocolViolation,
                "the server answered 206 to a request without a range; the \(state.bytesOnDisk) bytes on disk are kept")
            return .skipBody(.fail(error))
        }
        // Bytes on disk (a prefix, or completed ranges) are joined only under the checks below.
        let joining = current.sentRange && state.bytesOnDisk > 0
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
            case .satisfied(let first, let last, let complete) = contentRange.value, last < Int64.max
        else {
            return restartOrFail(.unjoinablePartial("malformed Content-Range \(header.debugDescription)"), current)
        }
        guard first == requestedFrom else {
            return restartOrFail(
                .unjoinablePartial("it starts at \(first), the file on disk ends at \(requestedFrom)"),
                current
            )
        }
        if let complete, let expected = state.expectedLength, complete != expected, joining {
            return restartOrFail(.representationChanged, current)
        }
        if complete == nil, let expected = state.expectedLength, last >= expected {
            // `bytes a-b/*` running past the length this download knows: not the representation its bytes belong
            // to, and a body that would make the file longer than that length.
            return restartOrFail(
                joining
                    ? .representationChanged
                    : .unjoinablePartial("it runs to byte \(last), past the known length \(expected)"),
                current)
        }
        if let (declared, length) = Self.contentLength(head) {
            guard let length, length == last - first + 1 else {
                return restartOrFail(.unjoinablePartial("Content-Length \(declared) disagrees with \(header)"), current)
            }
        }
        // Only the gap before the next completed range was asked for. A 206 that goes on (same representation, as
        // checked below) is read up to that range and no further: the transfer stops there.
        let gapEnd = state.completedRanges.ranges.first.map { min($0.lowerBound, last + 1) }
        if joining {
            // Joined only when the server checked a strong validator (`If-Range`), or, where the server is known to
            // ignore entity-tag If-Ranges, the stored strong entity tag was required; and in either case the 206
            // carries the stored validators and no others (RFC 9110 §15.3.7 asks a 206 for the validators a 200 would
            // carry; a cache that drops them may ignore `If-Range` too, and a join on its word would splice two
            // versions). The required tag is the stored one, so `confirmed(by:)` checks it too.
            let checked = current.sentIfRange || current.requiredETag != nil
            guard checked, state.validators.confirmed(by: head) else {
                return restartOrFail(.representationChanged, current)
            }
        }
        if !joining {
            adoptValidators(head)
        }
        state.expectedLength = complete ?? state.expectedLength
        state.acceptRanges = Self.acceptRanges(head) ?? state.acceptRanges
        finalHead = head
        lastStatus = 206
        exchange = Exchange(
            sentRange: current.sentRange, sentIfRange: current.sentIfRange, isPartial: true,
            bodyEnd: gapEnd ?? last + 1, bodyAccepted: true, stopsBeforeItsEnd: gapEnd.map { $0 < last + 1 } ?? false)
        let event: DownloadEvent =
            state.offset > 0
            ? .resumed(atOffset: state.offset, expectedLength: state.expectedLength)
            : .started(atOffset: 0, expectedLength: state.expectedLength)
        return .writeBody(BodyPlan(offset: state.offset, newFile: nil, event: event))
    }

    private mutating func receiveWhole(_ head: ResponseHead, _ current: Exchange) -> HeadAction {
        if let encoding = Self.contentEncoding(head) {
            // Only identity was accepted. A decoded body has no length to check and a truncated stream looks
            // complete (the transports do not verify the coding's end), so it would be a short body called
            // complete: refuse it, keeping whatever is on disk.
            let error = ResumableError(
                .protocolViolation,
                "the server sent a \(encoding)-encoded answer although only identity was accepted; "
                    + "its completeness cannot be verified, so it is not saved"
            )
            return .skipBody(.fail(error))
        }
        var length: Int64?
        if let (declared, parsed) = Self.contentLength(head) {
            guard let parsed else {
                let error = ResumableError(
                    .protocolViolation, "malformed or conflicting Content-Length \(declared.debugDescription)")
                return .skipBody(.fail(error))
            }
            length = parsed
        }
        if state.bytesOnDisk > 0, current.sentIfRange, current.requiredETag == nil, !ignoresEntityTagIfRange,
            let tag = state.validators.strongETag, Validators.identical(head.value("ETag"), tag),
            state.validators.agree(with: head)
        {
            // A 200 to `If-Range: <tag>` that carries that same strong tag: the representation did not change, the
            // server just ignores entity-tag If-Ranges (some CDNs honor only dates). Drop this answer unread and
            // ask again in a way such a server honors, instead of downloading the whole file again.
            ignoresEntityTagIfRange = true
            exchange = nil
            return .skipBody(.requestAgain)
        }
        if length == nil, let known = state.expectedLength, state.validators.vouchForSameBytes(as: head) {
            // No length of its own (its end is the connection's close), under the strong validator the length known
            // was learned with: the same representation byte for byte (RFC 9110 §8.8.1), so of that length. A close
            // before it is a cut to resume, never the end of the file.
            length = known
        }
        var newFile: RestartReason?
        if state.bytesOnDisk > 0 {
            // The limit is checked before anything changes: a refused restart leaves the state describing the bytes
            // on disk, so the token it ends with never pairs them with the new version's validators.
            restarts += 1
            guard restarts <= Self.maximumRestarts else {
                return .skipBody(.fail(restartLimitError()))
            }
            let previous = state.validators
            adoptValidators(head)
            if !Validators.identical(previous.etag, state.validators.etag)
                || !Validators.identical(previous.lastModified, state.validators.lastModified)
            {
                newFile = .representationChanged
            } else {
                newFile = .wholeRepresentation
            }
        } else {
            adoptValidators(head)
        }
        state.expectedLength = length
        state.acceptRanges = Self.acceptRanges(head)
        if !current.sentRange {
            servedWholeWithoutRange = true
            // This answer's own bytes are resumed with a range as usual after a cut; a range turned away again is
            // asked without one again (each such restart counts towards ``maximumRestarts``).
            rangesTurnedAway = false
        }
        state.offset = 0
        state.completedRanges = ByteRangeSet()
        finalHead = head
        lastStatus = head.status
        exchange = Exchange(
            sentRange: current.sentRange, sentIfRange: current.sentIfRange, isPartial: false, bodyEnd: length,
            bodyAccepted: true)
        return .writeBody(
            BodyPlan(offset: 0, newFile: newFile, event: .started(atOffset: 0, expectedLength: length)))
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
        guard completeLength == state.offset, state.validators.agree(with: head),
            state.expectedLength == nil || state.expectedLength == completeLength
        else {
            return restart(
                .unsatisfiableRange("the file on the server has \(completeLength) bytes, not \(state.offset)"))
        }
        // The server must have checked a validator: an `If-Range` it honored (§13.2.2: it is evaluated before the
        // range), or, without one, the stored strong ETag on the 416 itself. Otherwise a 416 for a shorter new
        // version would call the old prefix complete.
        if let required = current.requiredETag, !current.sentIfRange, head.value("ETag") != required {
            return restart(.unsatisfiableRange("a 416 to a range without If-Range that does not carry the ETag"))
        }
        guard current.sentIfRange || current.requiredETag != nil else {
            return restart(.unsatisfiableRange("a 416 to a range whose validator nothing checked"))
        }
        state.expectedLength = completeLength
        lastStatus = 416
        exchange = nil
        return .finished
    }

    /// A range request turned away by a server that served this run's request without a range: ask once more without
    /// one (rule 17i). Some servers refuse range requests (a 403, a malformed answer) yet serve the file whole; after
    /// a first answer stopped at its share, the rest could otherwise never be fetched, where one connection would
    /// have read the whole file. A server that turns the plain request away too fails the download there, with the
    /// bytes on disk kept. `nil` when the rule does not apply (the status is judged as usual).
    private mutating func turnedAway(_ current: Exchange) -> Outcome? {
        guard current.sentRange, servedWholeWithoutRange, !rangesTurnedAway else { return nil }
        rangesTurnedAway = true
        segmentsRefused = true
        exchange = nil
        return .requestAgain
    }

    private mutating func restartOrFail(_ reason: RestartReason, _ current: Exchange) -> HeadAction {
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
        dropBytes(reason)
        state.expectedLength = nil
        state.validators = Validators()
        exchange = nil
        return .requestAgain
    }

    /// Forgets the bytes on disk; the next request starts in a new file.
    private mutating func dropBytes(_ reason: RestartReason) {
        if state.bytesOnDisk > 0 { droppedBytes = droppedBytes ?? reason }
        state.offset = 0
        state.completedRanges = ByteRangeSet()
    }

    private func restartLimitError() -> ResumableError {
        ResumableError(
            .protocolViolation,
            "gave up after \(Self.maximumRestarts) restarts: the server's answers never fit together"
        )
    }

    private mutating func adoptValidators(_ head: ResponseHead) {
        state.validators = Validators(of: head)
        if !state.hasNameFromResponse {
            // The first response names the file (after redirects); later ones need not repeat it (§15.3.7).
            state.suggestedFilename = SuggestedFilename.choose(
                contentDisposition: head.value("Content-Disposition"), url: state.url)
            state.hasNameFromResponse = true
        }
    }

    // MARK: - Bodies

    /// Accounts for `count` body bytes about to be written at the offset; returns where they go.
    ///
    /// Throws when the body runs past what its head announced: those bytes must never reach the file.
    @discardableResult
    mutating func receiveBody(count: Int) throws(ResumableError) -> Int64 {
        try receiveBody(upTo: count).position
    }

    /// Accounts for up to `count` body bytes: returns where they go and how many of them to write, fewer when the
    /// answer goes on past the gap it fills (then the transfer stops once they are written: ``bodyIsComplete``).
    mutating func receiveBody(upTo count: Int) throws(ResumableError) -> (position: Int64, count: Int) {
        guard let current = exchange, current.bodyAccepted else {
            throw ResumableError(.protocolViolation, "body bytes without an accepted response")
        }
        var count = count
        if current.stopsBeforeItsEnd, let bodyEnd = current.bodyEnd {
            count = Int(min(Int64(count), max(bodyEnd - state.offset, 0)))
        }
        let position = state.offset
        let (end, overflow) = position.addingReportingOverflow(Int64(count))
        if overflow {
            throw ResumableError(.protocolViolation, "the body is larger than a file can be")
        }
        if let bodyEnd = current.bodyEnd, end > bodyEnd {
            throw ResumableError(
                .protocolViolation,
                "the body runs past its announced end (\(bodyEnd) bytes); the extra bytes were not written"
            )
        }
        state.offset = end
        absorbedRanges = nil
        if let next = state.completedRanges.ranges.first, end >= next.lowerBound {
            // The gap is filled: the prefix now runs on through the completed range after it.
            absorbedRanges = state.completedRanges
            state.absorbCompletedRanges()
        }
        return (position, count)
    }

    /// Whether the accepted answer's body is all written although its transfer goes on (it ran past the gap it
    /// fills): the engine stops the transfer, which then ends as if the body had.
    var bodyIsComplete: Bool {
        guard let current = exchange, current.stopsBeforeItsEnd, let bodyEnd = current.bodyEnd else { return false }
        return state.offset >= bodyEnd
    }

    /// Takes back body bytes that could not be written: the offset is where the failed write began, and a completed
    /// range the write would have joined to the prefix is a range again.
    mutating func revertBody(to position: Int64) {
        if let absorbedRanges {
            state.completedRanges = absorbedRanges
            self.absorbedRanges = nil
        }
        state.offset = min(state.offset, position)
    }

    /// Decides what follows a response whose body was accepted, given how the transfer ended.
    mutating func responseEnded(error: ResumableError?) -> Outcome {
        guard let current = exchange, current.bodyAccepted else {
            // Before a response: retried only when the cause is transient (a refused or reset connection, a
            // timeout), never a refused TLS handshake, a proxy's refusal or a URL the transport cannot request.
            let error = error ?? ResumableError(.network, "the connection closed before a response arrived")
            if error.code == .protocolViolation, let current = exchange, let outcome = turnedAway(current) {
                return outcome
            }
            return error.isTransient ? .retry(error) : .fail(error)
        }
        exchange = nil
        // A transfer stopped once the gap it fills was written ended as its body should have.
        if let error, !(current.stopsBeforeItsEnd && current.bodyEnd.map { state.offset >= $0 } == true) {
            return error.isTransient ? .retry(error) : .fail(error)
        }
        if let bodyEnd = current.bodyEnd, state.offset < bodyEnd {
            return .retry(
                ResumableError(.incompleteBody, "the body ended after \(state.offset) of \(bodyEnd) bytes"))
        }
        if current.isPartial {
            // A 206 may cover less than asked (RFC 9110 §15.3.7): ask for the rest.
            guard let expected = state.expectedLength, state.offset >= expected else { return .requestAgain }
            guard state.offset == expected else {
                return .fail(
                    ResumableError(
                        .protocolViolation, "the file holds \(state.offset) bytes, more than its length \(expected)"))
            }
            return .finished
        }
        if let expected = state.expectedLength, state.offset != expected {
            return .retry(
                ResumableError(.incompleteBody, "the body ended after \(state.offset) of \(expected) bytes"))
        }
        state.expectedLength = state.offset
        return .finished
    }

    // MARK: - Segments (several connections)

    /// What fetching the rest with several connections starts from.
    struct SegmentBasis: Sendable {
        /// The bytes in the file before the accepted response's body.
        var present: ByteRangeSet
        /// Where the accepted response's body goes: from the offset to where it ends.
        var probe: Range<Int64>
        /// The size of the whole representation.
        var total: Int64
    }

    /// How a segment's response head is judged.
    enum SegmentVerdict: Sendable {
        /// Write the body: a 206 for the range asked, or a prefix of it ending before `end`.
        case join(end: Int64)
        /// The file on the server is not the one being downloaded: restart the whole download from byte 0.
        case fileChanged(RestartReason)
        /// This answer cannot be used for the segment, though the file did not change; the segment is asked again.
        case unusable(ResumableError)
        /// The server is overloaded (408, 429, 5xx): fewer connections, and back off when none is left.
        case overloaded(ResumableError)
        /// The server turned this connection away with a status that says nothing about the file (a redirect, 401,
        /// 403, 404, …) while the connections already reading it go on: one connection fewer; with none left working,
        /// back off and continue from the disk, as after an overloaded answer.
        case refused(ResumableError)
        /// A permanent failure of the whole download.
        case fail(ResumableError)
    }

    /// The basis for fetching the rest with several connections, or `nil` when the accepted response must be
    /// read alone: no strong validator that `If-Range` can carry (or a server that ignores entity-tag
    /// `If-Range`s), no known length, or no sign of range support (a 206, or `Accept-Ranges: bytes`).
    func segmentBasis() -> SegmentBasis? {
        guard !segmentsRefused, !partialsNeedValidators, let current = exchange, current.bodyAccepted,
            let bodyEnd = current.bodyEnd,
            let total = state.expectedLength, bodyEnd <= total, state.offset < bodyEnd,
            !ignoresEntityTagIfRange, state.validators.ifRange != nil
        else { return nil }
        let advertised =
            state.acceptRanges?.lowercased().split(separator: ",")
            .contains { $0.trimmingCharacters(in: .whitespaces) == "bytes" } == true
        guard current.isPartial || advertised else { return nil }
        return SegmentBasis(present: state.bytesPresent, probe: state.offset..<bodyEnd, total: total)
    }

    /// The engine reads the accepted response as the first segment of a multi-connection phase: from now on
    /// ``segmentsProgressed(_:)`` and ``segmentsEnded(_:present:)`` account for the bytes.
    mutating func enterSegments() {
        exchange = nil
    }

    /// The request for one segment: `Range: bytes=a-b` under `If-Range` with the strong validator.
    func segmentRequest(_ range: Range<Int64>) -> Request {
        var fields = baseHeaders()
        fields.append(HTTPHeader(name: "Range", value: "bytes=\(range.lowerBound)-\(range.upperBound - 1)"))
        if let ifRange = state.validators.ifRange {
            fields.append(HTTPHeader(name: "If-Range", value: ifRange))
        }
        return Request(url: state.url, headers: fields, offset: range.lowerBound)
    }

    /// Judges the head of a segment's response, asked with ``segmentRequest(_:)`` for `requested`, before a byte
    /// of its body is written. Joined only: a 206 whose `Content-Range` starts at the first byte asked, ends no
    /// later than the last, and has the known total; no content coding, not multipart; carrying the stored
    /// validators (the strong ETag when there is one, else the Last-Modified date) and no others.
    mutating func judgeSegment(_ head: ResponseHead, requested: Range<Int64>) -> SegmentVerdict {
        let status = head.status
        switch status {
        case 206:
            break
        case 200, 203:
            // The whole file instead of the range: If-Range failed (the file changed), or the server ignores ranges
            // under this load. The validators tell which. (A 200 without the stored validators stays a restart: left
            // to one connection, its range request would take such an answer, a page of the server's, for the file.)
            return state.validators.named(by: head)
                ? .unusable(
                    ResumableError(
                        .protocolViolation, "the server answered \(status) to a range request for a segment"))
                : .fileChanged(.representationChanged)
        case 416:
            // A range inside a file of the length the server itself names cannot be unsatisfiable: a 416 whose
            // `Content-Range` is `bytes */<the known total>`, with no validator that differs, is the server failing
            // under this load, not a new file (a new one of the same length fails `If-Range`: a 200). Restarting would
            // throw away every byte on disk; the segment is asked again instead. Any other 416 says the file changed.
            if let header = head.value("Content-Range"), let contentRange = ContentRange(header),
                case .unsatisfied(let completeLength) = contentRange.value, completeLength == state.expectedLength,
                requested.upperBound <= completeLength, state.validators.agree(with: head)
            {
                return .unusable(
                    ResumableError(
                        .protocolViolation,
                        "the server answered 416 to a segment inside the file of \(completeLength) bytes it names",
                        httpStatus: 416))
            }
            return .fileChanged(.unsatisfiableRange("a segment's range is beyond the file on the server"))
        case 408, 429, 500...599:
            let retryAfter = head.value("Retry-After").flatMap { RetryAfter.delay($0, now: Date()) }
            return .overloaded(
                ResumableError(
                    .httpStatus, "the server answered \(status) \(Self.reason(status)) to a segment",
                    httpStatus: status, retryAfter: retryAfter))
        case 407:
            return .fail(
                ResumableError(
                    .proxy, "the proxy requires authentication (407 Proxy Authentication Required)", httpStatus: 407))
        default:
            // Some servers and CDNs turn away extra connections with 403 (or a redirect to a mirror, a 404 from an
            // edge without the file); a changed file shows as a 200, a 416 or other validators, judged above.
            return .refused(
                ResumableError(
                    .httpStatus,
                    "the server answered \(status) \(Self.reason(status)) to a segment of \(state.url.absoluteString)",
                    httpStatus: status))
        }
        // A validator that differs shows another version.
        if state.validators.conflict(with: head) { return .fileChanged(.representationChanged) }
        func unusable(_ why: String) -> SegmentVerdict {
            .unusable(ResumableError(.protocolViolation, "a segment's 206 cannot be joined: \(why)"))
        }
        // None that differs, but not exactly the stored ones either (origins and caches that leave validators off their
        // 206s, or add one the first answer lacked): nothing shows another version, nothing confirms this one for a
        // segment. The segment is not joined and no byte is thrown away; a server that keeps answering so ends the
        // phase, and one connection goes on, its answers judged as any resume's (`receivePartial`).
        guard state.validators.confirmed(by: head) else {
            partialsNeedValidators = true
            return unusable("its validators do not confirm the file")
        }
        if head.value("Content-Type")?.lowercased().hasPrefix("multipart/byteranges") == true {
            return unusable("multipart/byteranges")
        }
        if let encoding = Self.contentEncoding(head) { return unusable("Content-Encoding \(encoding)") }
        guard let header = head.value("Content-Range"), let contentRange = ContentRange(header),
            case .satisfied(let first, let last, let complete) = contentRange.value, last < Int64.max
        else {
            return unusable("no usable Content-Range")
        }
        if let complete, complete != state.expectedLength {
            return .fileChanged(.representationChanged)
        }
        guard complete != nil, first == requested.lowerBound, last < requested.upperBound else {
            return unusable("Content-Range \(header) is not bytes \(requested.lowerBound)-\(requested.upperBound - 1)")
        }
        if let (declared, length) = Self.contentLength(head) {
            guard let length, length == last - first + 1 else {
                return unusable("Content-Length \(declared) disagrees with \(header)")
            }
        }
        return .join(end: last + 1)
    }

    /// The bytes a multi-connection phase has written so far (for tokens and progress).
    mutating func segmentsProgressed(_ present: ByteRangeSet) {
        state.setBytesPresent(present)
    }

    /// How a multi-connection phase ended, with the bytes it left in the file.
    enum SegmentsEnd: Sendable {
        /// Every byte is in the file.
        case complete
        /// The file changed on the server.
        case restart(RestartReason)
        /// A transient failure left no connection working: back off, then continue from what is on disk.
        case retry(ResumableError)
        /// The server does not answer segments usably although the file did not change (it ignores ranges under
        /// load): continue with one connection, as a plain download would, for the rest of the task.
        case single
        /// A permanent failure.
        case fail(ResumableError)
    }

    /// Ends a multi-connection phase: records what it wrote and says what follows.
    mutating func segmentsEnded(_ end: SegmentsEnd, present: ByteRangeSet) -> Outcome {
        state.setBytesPresent(present)
        switch end {
        case .complete:
            guard let total = state.expectedLength, state.offset == total else {
                return .retry(ResumableError(.incompleteBody, "the segments ended before the file was complete"))
            }
            return .finished
        case .restart(let reason):
            return restart(reason)
        case .retry(let error):
            return .retry(error)
        case .single:
            segmentsRefused = true
            return .requestAgain
        case .fail(let error):
            return .fail(error)
        }
    }

    // MARK: - Helpers

    private static func named(_ header: HTTPHeader, _ name: String) -> Bool {
        header.name.caseInsensitiveCompare(name) == .orderedSame
    }

    ///
    /// A transfer coding other than `chunked` (`Transfer-Encoding: gzip, chunked`) counts too: the transports decode
    /// it as well, and a cut stream looks just as complete.
    static func contentEncoding(_ head: ResponseHead) -> String? {
        func codings(_ field: String, besides ignored: Set<String>) -> [String] {
            head.values(field)
                .flatMap { $0.split(separator: ",") }
                .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
                .filter { !$0.isEmpty && !ignored.contains($0) }
        }
        let content = codings("Content-Encoding", besides: ["identity"])
        let transferCodings = codings("Transfer-Encoding", besides: ["identity"])
        var transfer = transferCodings.filter { $0 != "chunked" }.map { "transfer coding \($0)" }
        // Chunked twice (RFC 9112 §6.1 forbids it): the transports decode one layer, and the other's framing would be
        // written as the file.
        if transferCodings.count(where: { $0 == "chunked" }) > 1 {
            transfer.append("transfer coding chunked, applied more than once")
        }
        let encodings = content + transfer
        return encodings.isEmpty ? nil : encodings.joined(separator: ", ")
    }

    /// The `Accept-Ranges` value a token may keep: `nil` when the field is absent or holds what a header value
    /// cannot (a control character), which the token reader would refuse.
    static func acceptRanges(_ head: ResponseHead) -> String? {
        head.value("Accept-Ranges").flatMap { HTTPFieldSyntax.isStorableValue($0) ? $0 : nil }
    }

    static func reason(_ status: Int) -> String {
        ReasonPhrase.for(status)
    }

    /// The response's `Content-Length`: `nil` without one; else every field's value as received (joined with `, `,
    /// for messages) and the length they declare, `nil` when they declare none (malformed, or values that differ:
    /// ``HTTPSyntax/contentLength(_:)``). Both transports go through it: libcurl reports each repeated field,
    /// URLSession one merged list.
    static func contentLength(_ head: ResponseHead) -> (declared: String, length: Int64?)? {
        let fields = head.values("Content-Length")
        guard !fields.isEmpty else { return nil }
        return (fields.joined(separator: ", "), HTTPSyntax.contentLength(fields))
    }
}

/// Reason phrases for the statuses a download meets.
enum ReasonPhrase {
    static func `for`(_ status: Int) -> String {
        switch status {
        case 202: return "Accepted"
        case 204: return "No Content"
        case 205: return "Reset Content"
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
