import Foundation
import Testing

@testable import Resumable

/// Unit tests of the resume decisions, without a network: heads are written by hand.
@Suite("Resume state machine")
struct ResumeStateMachineTests {
    static let url = URL(string: "http://127.0.0.1:8080/file.bin")!
    static let strongETag = "\"v1\""
    static let lastModified = "Tue, 10 Nov 2026 08:12:31 GMT"
    static let laterDate = "Tue, 10 Nov 2026 08:12:35 GMT"

    static func head(_ status: Int, _ headers: [String: String] = [:]) -> ResponseHead {
        ResponseHead(status: status, headers: headers.map { HTTPHeader(name: $0.key, value: $0.value) })
    }

    static func header(_ request: ResumeStateMachine.RequestPlan, _ name: String) -> String? {
        request.headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    /// A machine that received `received` bytes of a 100-byte 200 under the given validators, then lost the
    /// connection.
    static func interrupted(
        received: Int = 40,
        validators: [String: String] = ["ETag": strongETag],
        length: Int = 100
    ) -> ResumeStateMachine {
        var machine = ResumeStateMachine(url: url, headers: [], maximumRedirects: 10)
        _ = machine.nextRequest()
        var headers = validators
        headers["Content-Length"] = "\(length)"
        guard case .writeBody = machine.receive(head(200, headers)) else {
            Issue.record("a 200 must be written")
            return machine
        }
        _ = try? machine.receiveBody(count: received)
        _ = machine.responseEnded(error: ResumableError(.network, "reset"))
        return machine
    }

    /// A token for `url` under the strong ETag, as if a download of it had been paused at `offset`.
    static func token(offset: Int64, expectedLength: Int64?, originalURL: URL = url) -> ResumeToken {
        ResumeToken(
            url: url,
            originalURL: originalURL,
            offset: offset,
            expectedLength: expectedLength,
            etag: strongETag,
            lastModified: nil,
            responseDate: nil,
            acceptRanges: "bytes",
            tempPath: "/tmp/" + TemporaryFileName.make(),
            suggestedFilename: "file.bin",
            destination: nil,
            headers: [:],
            createdAt: Date(),
            updatedAt: Date()
        )
    }

    static func isRequestAgain(_ decision: ResumeStateMachine.HeadDecision) -> Bool {
        if case .skipBody(.requestAgain) = decision { return true }
        return false
    }

    // MARK: What to send

    @Test("A fresh download asks for the identity encoding and no range")
    func freshRequest() {
        var machine = ResumeStateMachine(url: Self.url, headers: [], maximumRedirects: 10)
        let request = machine.nextRequest()
        #expect(Self.header(request, "Accept-Encoding") == "identity")
        #expect(Self.header(request, "Range") == nil)
        #expect(Self.header(request, "If-Range") == nil)
        #expect(request.offset == 0)
        #expect(Self.header(request, "User-Agent") == "Resumable/1")
        var custom = ResumeStateMachine(
            url: Self.url, headers: [HTTPHeader(name: "user-agent", value: "app/2")], maximumRedirects: 10)
        #expect(custom.nextRequest().headers.filter { $0.name.lowercased() == "user-agent" }.map(\.value) == ["app/2"])
    }

    @Test("A resume sends Range from the offset and If-Range with the strong ETag")
    func resumeWithStrongETag() {
        var machine = Self.interrupted()
        let request = machine.nextRequest()
        #expect(Self.header(request, "Range") == "bytes=40-")
        #expect(Self.header(request, "If-Range") == Self.strongETag)
        #expect(Self.header(request, "Accept-Encoding") == "identity")
    }

    @Test("A weak ETag never goes into If-Range: without a strong validator the bytes on disk are dropped")
    func weakETagIsNotSent() {
        var machine = Self.interrupted(validators: ["ETag": "W/\"v1\"", "Last-Modified": Self.lastModified])
        let request = machine.nextRequest()
        #expect(Self.header(request, "If-Range") == nil)
        #expect(Self.header(request, "Range") == nil)
        #expect(request.offset == 0)
    }

    @Test("Last-Modified goes into If-Range only when the Date proves it strong")
    func strongLastModified() {
        var strong = Self.interrupted(validators: ["Last-Modified": Self.lastModified, "Date": Self.laterDate])
        #expect(Self.header(strong.nextRequest(), "If-Range") == Self.lastModified)

        var weak = Self.interrupted(validators: ["Last-Modified": Self.lastModified, "Date": Self.lastModified])
        let request = weak.nextRequest()
        #expect(Self.header(request, "If-Range") == nil)
        #expect(Self.header(request, "Range") == nil, "a weak date cannot prove a join safe")

        var noDate = Self.interrupted(validators: ["Last-Modified": Self.lastModified])
        #expect(Self.header(noDate.nextRequest(), "If-Range") == nil)
    }

    @Test("An ETag wins over Last-Modified in If-Range")
    func etagPreferred() {
        var machine = Self.interrupted(
            validators: ["ETag": Self.strongETag, "Last-Modified": Self.lastModified, "Date": Self.laterDate]
        )
        #expect(Self.header(machine.nextRequest(), "If-Range") == Self.strongETag)
    }

    @Test("Without any validator the bytes on disk are dropped instead of risking a splice")
    func noValidatorsRestart() {
        var machine = Self.interrupted(validators: [:])
        let request = machine.nextRequest()
        #expect(request.offset == 0)
        #expect(Self.header(request, "Range") == nil)
    }

    @Test("Offsets above 4 GiB are formatted in full", arguments: [Int64(4_294_967_296), 9_999_999_999, Int64.max - 1])
    func largeOffsets(offset: Int64) throws {
        let token = Self.token(offset: offset, expectedLength: Int64.max)
        var machine = ResumeStateMachine(
            token: token,
            bytesOnDisk: offset,
            replacingURL: nil,
            headers: [],
            maximumRedirects: 10
        )
        #expect(Self.header(machine.nextRequest(), "Range") == "bytes=\(offset)-")
        let decision = machine.receive(
            Self.head(206, ["Content-Range": "bytes \(offset)-\(Int64.max - 1)/\(Int64.max)", "ETag": Self.strongETag])
        )
        guard let written = decision.written, written.newFile == nil else {
            Issue.record("expected a join, got \(decision)")
            return
        }
        #expect(written.offset == offset)
    }

    @Test("The resume offset is the smaller of the token's and the file's")
    func reconcileWithFile() {
        let token = Self.token(offset: 500, expectedLength: 1000)
        var shorter = ResumeStateMachine(
            token: token, bytesOnDisk: 300, replacingURL: nil, headers: [], maximumRedirects: 1)
        #expect(shorter.nextRequest().offset == 300)
        var longer = ResumeStateMachine(
            token: token, bytesOnDisk: 900, replacingURL: nil, headers: [], maximumRedirects: 1)
        #expect(longer.nextRequest().offset == 500)
    }

    // MARK: 206

    @Test("A 206 that starts at the offset under the same ETag is joined")
    func joinGoodPartial() throws {
        var machine = Self.interrupted()
        _ = machine.nextRequest()
        let decision = machine.receive(
            Self.head(206, ["Content-Range": "bytes 40-99/100", "Content-Length": "60", "ETag": Self.strongETag])
        )
        guard let written = decision.written, written.offset == 40, written.newFile == nil else {
            Issue.record("expected a join at 40, got \(decision)")
            return
        }
        try machine.receiveBody(count: 60)
        guard case .finished = machine.responseEnded(error: nil) else {
            Issue.record("expected finished")
            return
        }
        #expect(machine.offset == 100)
    }

    @Test(
        "A 206 that cannot be joined restarts from zero",
        arguments: [
            ["Content-Range": "bytes 41-99/100", "ETag": "\"v1\""],  // starts elsewhere
            ["Content-Range": "bytes 0-99/100", "ETag": "\"v1\""],  // starts at 0 though asked for 40
            ["Content-Range": "bytes 40-99/100", "ETag": "\"v2\""],  // validators changed
            ["Content-Range": "bytes 40-119/120", "ETag": "\"v1\""],  // total changed
            ["Content-Range": "bytes 40-99/100", "ETag": "\"v1\"", "Last-Modified": "Wed, 11 Nov 2026 00:00:00 GMT"],
            ["Content-Range": "bytes 40-99/100", "ETag": "\"v1\"", "Content-Length": "61"],  // length disagrees
            ["Content-Range": "bytes 40-99/100", "ETag": "\"v1\"", "Content-Encoding": "gzip"],
            ["Content-Type": "multipart/byteranges; boundary=x", "ETag": "\"v1\""],
            ["ETag": "\"v1\""],  // no Content-Range at all
            // The WPT invalid-content-range cases.
            ["Content-Range": "0-1/1000"], ["Content-Range": "bytes -10-100"], ["Content-Range": "bytes 7-4/10"],
            ["Content-Range": "bytes ABC-1/10"], ["Content-Range": "80"], ["Content-Range": "bytes something"],
            ["Content-Range": "-12"], ["Content-Range": "bytes 3 3"], ["Content-Range": "bytes */100"],
        ]
    )
    func unjoinablePartialRestarts(headers: [String: String]) {
        var machine = Self.interrupted()
        _ = machine.nextRequest()
        let decision = machine.receive(Self.head(206, headers))
        #expect(Self.isRequestAgain(decision), "got \(decision)")
        #expect(machine.offset == 0)
        let next = machine.nextRequest()
        #expect(Self.header(next, "Range") == nil)
        #expect(next.offset == 0)
    }

    @Test("Bytes dropped before the request start a new temporary file, once")
    func droppedBytesStartANewFile() {
        var machine = Self.interrupted(validators: ["ETag": "W/\"v1\""])
        let plan = machine.nextRequest()
        #expect(plan.newFile == .noValidators)
        #expect(plan.offset == 0)
        let decision = machine.receive(Self.head(200, ["Content-Length": "100", "ETag": "W/\"v1\""]))
        #expect(decision.written?.offset == 0)
        #expect(decision.written?.newFile == nil, "the file was already switched before the request")
    }

    @Test("A short 206 is continued with another range request")
    func shortPartialContinues() throws {
        var machine = Self.interrupted()
        _ = machine.nextRequest()
        _ = machine.receive(Self.head(206, ["Content-Range": "bytes 40-59/100", "ETag": Self.strongETag]))
        try machine.receiveBody(count: 20)
        guard case .requestAgain = machine.responseEnded(error: nil) else {
            Issue.record("a short 206 must be continued")
            return
        }
        let next = machine.nextRequest()
        #expect(Self.header(next, "Range") == "bytes=60-")
        #expect(Self.header(next, "If-Range") == Self.strongETag)
    }

    @Test("A 206 body that ends before its Content-Range says is retried, never complete")
    func partialBodyEndsEarly() throws {
        var machine = Self.interrupted()
        _ = machine.nextRequest()
        _ = machine.receive(Self.head(206, ["Content-Range": "bytes 40-99/100", "ETag": Self.strongETag]))
        try machine.receiveBody(count: 10)
        guard case .retry(let error) = machine.responseEnded(error: nil) else {
            Issue.record("expected a retry")
            return
        }
        #expect(error.code == .incompleteBody)
        #expect(machine.offset == 50)
    }

    @Test("Body bytes beyond the announced end are refused")
    func bodyTooLong() throws {
        var machine = Self.interrupted()
        _ = machine.nextRequest()
        _ = machine.receive(Self.head(206, ["Content-Range": "bytes 40-99/100", "ETag": Self.strongETag]))
        try machine.receiveBody(count: 50)
        #expect(throws: ResumableError.self) { try machine.receiveBody(count: 11) }
        #expect(machine.offset == 90)
    }

    @Test("A 206 to a request without a range is accepted only from byte 0")
    func partialWithoutRange() {
        var machine = ResumeStateMachine(url: Self.url, headers: [], maximumRedirects: 10)
        _ = machine.nextRequest()
        let decision = machine.receive(Self.head(206, ["Content-Range": "bytes 0-99/100"]))
        guard let written = decision.written, written.offset == 0, written.newFile == nil else {
            Issue.record("expected a write from 0")
            return
        }
        var other = ResumeStateMachine(url: Self.url, headers: [], maximumRedirects: 10)
        _ = other.nextRequest()
        guard case .skipBody(.fail) = other.receive(Self.head(206, ["Content-Range": "bytes 5-99/100"])) else {
            Issue.record("expected a failure")
            return
        }
    }

    // MARK: 200

    @Test("A 200 to a range request truncates and restarts with the new validators")
    func wholeRepresentationRestarts() {
        var machine = Self.interrupted()
        _ = machine.nextRequest()
        let decision = machine.receive(Self.head(200, ["Content-Length": "120", "ETag": "\"v2\""]))
        guard let written = decision.written, written.offset == 0, written.newFile == .representationChanged else {
            Issue.record("expected a restart, got \(decision)")
            return
        }
        #expect(machine.offset == 0)
        #expect(machine.expectedLength == 120)
        #expect(machine.validators.etag == "\"v2\"")
    }

    @Test("A 200 carrying the same strong ETag as the If-Range is dropped unread, then a bare Range is sent")
    func entityTagIfRangeIgnored() throws {
        var machine = Self.interrupted()
        #expect(Self.header(machine.nextRequest(), "If-Range") == Self.strongETag)
        // The quirk: the representation is unchanged (same strong tag), yet the server answered 200.
        let quirk = machine.receive(Self.head(200, ["Content-Length": "100", "ETag": Self.strongETag]))
        guard case .skipBody(.requestAgain) = quirk else {
            Issue.record("expected the 200 to be dropped unread, got \(quirk)")
            return
        }
        #expect(machine.offset == 40)
        #expect(machine.ignoresEntityTagIfRange)
        // No strong date to send instead: a bare Range, and the 206 must carry the same strong tag.
        let retry = machine.nextRequest()
        #expect(retry.newFile == nil)
        #expect(Self.header(retry, "Range") == "bytes=40-")
        #expect(Self.header(retry, "If-Range") == nil)
        let joined = machine.receive(
            Self.head(206, ["Content-Range": "bytes 40-99/100", "Content-Length": "60", "ETag": Self.strongETag]))
        #expect(joined.written?.offset == 40)
        #expect(joined.written?.newFile == nil)
    }

    @Test("Where entity-tag If-Ranges are ignored, a strong Last-Modified is sent instead")
    func entityTagIfRangeIgnoredUsesDate() {
        var machine = Self.interrupted(
            validators: ["ETag": Self.strongETag, "Last-Modified": Self.lastModified, "Date": Self.laterDate])
        _ = machine.nextRequest()
        _ = machine.receive(
            Self.head(
                200,
                [
                    "Content-Length": "100", "ETag": Self.strongETag, "Last-Modified": Self.lastModified,
                    "Date": Self.laterDate,
                ]))
        let retry = machine.nextRequest()
        #expect(Self.header(retry, "If-Range") == Self.lastModified)
        #expect(Self.header(retry, "Range") == "bytes=40-")
    }

    @Test(
        "Where entity-tag If-Ranges are ignored, a 206 without the same strong ETag is never joined",
        arguments: [[:], ["ETag": "\"v2\""], ["ETag": "W/\"v1\""]]
    )
    func entityTagIfRangeIgnoredNeedsTag(_ validators: [String: String]) {
        var machine = Self.interrupted()
        _ = machine.nextRequest()
        _ = machine.receive(Self.head(200, ["Content-Length": "100", "ETag": Self.strongETag]))
        _ = machine.nextRequest()
        var headers = validators
        headers["Content-Range"] = "bytes 40-99/100"
        let decision = machine.receive(Self.head(206, headers))
        guard case .skipBody(.requestAgain) = decision else {
            Issue.record("expected a restart, got \(decision)")
            return
        }
        let restart = machine.nextRequest()
        #expect(restart.newFile == .representationChanged)
        #expect(Self.header(restart, "Range") == nil)
    }

    @Test("A server that ignores the range as well gets the whole file once, not a loop")
    func ignoredRangeAfterQuirk() {
        var machine = Self.interrupted()
        _ = machine.nextRequest()
        _ = machine.receive(Self.head(200, ["Content-Length": "100", "ETag": Self.strongETag]))
        _ = machine.nextRequest()
        let decision = machine.receive(Self.head(200, ["Content-Length": "100", "ETag": Self.strongETag]))
        guard let written = decision.written, written.offset == 0, written.newFile == .wholeRepresentation else {
            Issue.record("expected a restart, got \(decision)")
            return
        }
    }

    @Test("A 200 with the same weak ETag or no ETag restarts at once")
    func ignoredRangeWithoutStrongTag() {
        var machine = Self.interrupted(
            validators: ["Last-Modified": Self.lastModified, "Date": Self.laterDate])
        _ = machine.nextRequest()
        let decision = machine.receive(
            Self.head(
                200, ["Content-Length": "100", "Last-Modified": Self.lastModified, "Date": Self.laterDate]))
        guard let written = decision.written, written.offset == 0, written.newFile == .wholeRepresentation else {
            Issue.record("expected a restart, got \(decision)")
            return
        }
        #expect(!machine.ignoresEntityTagIfRange)
    }

    @Test("A 407 is the proxy's refusal, whatever the server: .proxy, never retried, nothing written")
    func proxyAuthenticationRequired() {
        var machine = Self.interrupted()
        _ = machine.nextRequest()
        let decision = machine.receive(Self.head(407, ["Proxy-Authenticate": "Basic realm=\"corp\""]))
        guard case .skipBody(.fail(let error)) = decision else {
            Issue.record("expected a permanent failure, got \(decision)")
            return
        }
        #expect(error.code == .proxy)
        #expect(error.httpStatus == 407)
        #expect(!error.isTransient)
        #expect(machine.offset == 40)
    }

    @Test("A body shorter than its Content-Length is retried, never complete")
    func shortWholeBody() throws {
        var machine = ResumeStateMachine(url: Self.url, headers: [], maximumRedirects: 10)
        _ = machine.nextRequest()
        _ = machine.receive(Self.head(200, ["Content-Length": "26", "ETag": Self.strongETag]))
        try machine.receiveBody(count: 5)
        guard case .retry(let error) = machine.responseEnded(error: nil) else {
            Issue.record("expected a retry")
            return
        }
        #expect(error.code == .incompleteBody)
    }

    @Test("Malformed or conflicting Content-Length fails clearly", arguments: ["abc", "-5", "10, 20", "", "1e3"])
    func malformedContentLength(value: String) {
        var machine = ResumeStateMachine(url: Self.url, headers: [], maximumRedirects: 10)
        _ = machine.nextRequest()
        guard case .skipBody(.fail(let error)) = machine.receive(Self.head(200, ["Content-Length": value])) else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.code == .protocolViolation)
    }

    @Test("A content-encoded answer (identity was asked) is refused: its end cannot be verified")
    func contentEncodedIsNotResumable() throws {
        var machine = ResumeStateMachine(url: Self.url, headers: [], maximumRedirects: 10)
        _ = machine.nextRequest()
        let action = machine.receive(
            Self.head(200, ["Content-Encoding": "gzip", "Content-Length": "10", "ETag": "\"v1\""]))
        guard case .skipBody(.fail(let error)) = action else {
            Issue.record("a content-encoded answer must be refused, got \(action)")
            return
        }
        #expect(error.code == .protocolViolation)
        var paused = Self.interrupted()
        _ = paused.nextRequest()
        guard case .skipBody(.fail) = paused.receive(Self.head(200, ["Content-Encoding": "gzip", "ETag": "\"v2\""]))
        else {
            Issue.record("a content-encoded answer to a resume must be refused too")
            return
        }
        #expect(paused.offset == 40, "the bytes on disk are kept")
    }

    // MARK: 416

    @Test("A 416 with bytes */offset and unchanged validators means the file is complete")
    func unsatisfiableComplete() {
        var machine = Self.interrupted(received: 100)
        _ = machine.nextRequest()
        guard case .skipBody(.finished) = machine.receive(Self.head(416, ["Content-Range": "bytes */100"])) else {
            Issue.record("expected finished")
            return
        }
        #expect(machine.offset == 100)
    }

    @Test(
        "A 416 that does not prove completeness restarts",
        arguments: [
            ["Content-Range": "bytes */60"],  // the file shrank
            ["Content-Range": "bytes */150"],
            [:],  // ambiguous
            ["Content-Range": "bytes */100", "ETag": "\"v2\""],  // changed
        ]
    )
    func unsatisfiableRestarts(headers: [String: String]) {
        var machine = Self.interrupted(received: 100)
        _ = machine.nextRequest()
        #expect(Self.isRequestAgain(machine.receive(Self.head(416, headers))))
        #expect(machine.offset == 0)
    }

    // MARK: Errors

    @Test("Error statuses never become the file", arguments: [400, 401, 403, 404, 410, 418, 451])
    func permanentStatuses(status: Int) {
        var machine = ResumeStateMachine(url: Self.url, headers: [], maximumRedirects: 10)
        _ = machine.nextRequest()
        guard case .skipBody(.fail(let error)) = machine.receive(Self.head(status)) else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.httpStatus == status)
        #expect(!error.isTransient)
    }

    @Test("5xx, 408 and 429 are transient and honour Retry-After", arguments: [408, 429, 500, 502, 503, 504])
    func transientStatuses(status: Int) {
        var machine = Self.interrupted()
        _ = machine.nextRequest()
        guard case .skipBody(.retry(let error)) = machine.receive(Self.head(status, ["Retry-After": "3"])) else {
            Issue.record("expected a retry")
            return
        }
        #expect(error.isTransient)
        #expect(error.retryAfter == .seconds(3))
        #expect(machine.offset == 40, "the bytes on disk are kept")
    }

    @Test("When a resumed URL is gone, the original URL is tried once")
    func fallsBackToOriginalURL() {
        let original = URL(string: "http://127.0.0.1:8080/latest")!
        let token = Self.token(offset: 40, expectedLength: 100, originalURL: original)
        var machine = ResumeStateMachine(
            token: token, bytesOnDisk: 40, replacingURL: nil, headers: [], maximumRedirects: 10)
        _ = machine.nextRequest()
        #expect(Self.isRequestAgain(machine.receive(Self.head(404))))
        #expect(machine.nextRequest().url == original)
        guard case .skipBody(.fail) = machine.receive(Self.head(404)) else {
            Issue.record("the second 404 is final")
            return
        }
    }

    // MARK: Redirects

    @Test("Redirects are followed with the range re-sent")
    func redirectKeepsRange() {
        var machine = Self.interrupted()
        _ = machine.nextRequest()
        #expect(Self.isRequestAgain(machine.receive(Self.head(301, ["Location": "/moved/file.bin"]))))
        let next = machine.nextRequest()
        #expect(next.url.absoluteString == "http://127.0.0.1:8080/moved/file.bin")
        #expect(Self.header(next, "Range") == "bytes=40-")
    }

    @Test("Redirects to other schemes, loops and long chains are refused")
    func badRedirects() {
        var ftp = ResumeStateMachine(url: Self.url, headers: [], maximumRedirects: 10)
        _ = ftp.nextRequest()
        guard case .skipBody(.fail(let error)) = ftp.receive(Self.head(302, ["Location": "ftp://127.0.0.1/x"])) else {
            Issue.record("ftp must be refused")
            return
        }
        #expect(error.code == .redirect)

        var loop = ResumeStateMachine(url: Self.url, headers: [], maximumRedirects: 10)
        var outcome: ResumeStateMachine.HeadDecision = .skipBody(.requestAgain)
        for index in 0..<6 where Self.isRequestAgain(outcome) {
            _ = loop.nextRequest()
            outcome = loop.receive(Self.head(302, ["Location": index % 2 == 0 ? "/a" : "/b"]))
        }
        guard case .skipBody(.fail(let loopError)) = outcome else {
            Issue.record("a loop must be detected")
            return
        }
        #expect(loopError.code == .redirect)

        var long = ResumeStateMachine(url: Self.url, headers: [], maximumRedirects: 3)
        var last: ResumeStateMachine.HeadDecision = .skipBody(.requestAgain)
        for index in 0..<5 where Self.isRequestAgain(last) {
            _ = long.nextRequest()
            last = long.receive(Self.head(307, ["Location": "/hop\(index)"]))
        }
        guard case .skipBody(.fail) = last else {
            Issue.record("more than 3 hops must fail")
            return
        }
    }

    @Test("Credentials are not carried to another origin")
    func credentialsStayHome() {
        let headers = [
            HTTPHeader(name: "Authorization", value: "Bearer x"), HTTPHeader(name: "Cookie", value: "a=b"),
            HTTPHeader(name: "Proxy-Authorization", value: "Basic y"), HTTPHeader(name: "X-Trace", value: "1"),
        ]
        var machine = ResumeStateMachine(url: Self.url, headers: headers, maximumRedirects: 10)
        #expect(Self.header(machine.nextRequest(), "Authorization") == "Bearer x")
        _ = machine.receive(Self.head(302, ["Location": "http://127.0.0.2:9090/elsewhere"]))
        let next = machine.nextRequest()
        #expect(Self.header(next, "Authorization") == nil)
        #expect(Self.header(next, "Cookie") == nil)
        #expect(Self.header(next, "Proxy-Authorization") == nil)
        #expect(Self.header(next, "X-Trace") == "1")
    }

    @Test("A server whose answers never fit together is given up on")
    func restartsAreBounded() {
        var machine = Self.interrupted()
        var failed = false
        for _ in 0..<(ResumeStateMachine.maximumRestarts + 2) {
            _ = machine.nextRequest()
            switch machine.receive(Self.head(200, ["Content-Length": "100", "ETag": "\"v\(UUID())\""])) {
            case .writeBody:
                _ = try? machine.receiveBody(count: 10)
                _ = machine.responseEnded(error: ResumableError(.network, "reset"))
            case .skipBody(.fail):
                failed = true
            case .skipBody:
                break
            }
            if failed { break }
        }
        #expect(failed)
    }

    // MARK: curl 3035

    @Test("curl 3035: offsets advance 5 then 11, a 404 and a surprise 200 do no damage")
    func curl3035() throws {
        var machine = ResumeStateMachine(url: Self.url, headers: [], maximumRedirects: 10)
        _ = machine.nextRequest()
        _ = machine.receive(Self.head(200, ["Content-Length": "26", "ETag": Self.strongETag]))
        try machine.receiveBody(count: 5)
        guard case .retry = machine.responseEnded(error: nil) else { throw Failure("retry after 5 bytes") }
        #expect(Self.header(machine.nextRequest(), "Range") == "bytes=5-")
        _ = machine.receive(Self.head(206, ["Content-Range": "bytes 5-25/26", "ETag": Self.strongETag]))
        try machine.receiveBody(count: 6)
        guard case .retry = machine.responseEnded(error: nil) else { throw Failure("retry after 11 bytes") }
        #expect(Self.header(machine.nextRequest(), "Range") == "bytes=11-")
        guard case .skipBody(.fail) = machine.receive(Self.head(404)) else { throw Failure("404 fails") }
        #expect(machine.offset == 11)
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
