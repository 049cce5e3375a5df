import Foundation
import Testing

@testable import Resumable

@Suite("Judging a segment's answer before a byte of it is written")
struct SegmentJudgementTests {
    static let etag = "\"v1\""
    static let total: Int64 = 8 << 20

    /// A machine that accepted a 200 for the whole file with a strong ETag and Accept-Ranges: bytes.
    func machine() -> ResumeStateMachine {
        var machine = ResumeStateMachine(
            url: URL(string: "http://127.0.0.1:1/f")!, headers: [], maximumRedirects: 5)
        _ = machine.nextRequest()
        let head = ResponseHead(
            status: 200,
            headers: [
                HTTPHeader(name: "Content-Length", value: "\(Self.total)"), HTTPHeader(name: "ETag", value: Self.etag),
                HTTPHeader(name: "Accept-Ranges", value: "bytes"),
            ])
        _ = machine.receive(head)
        return machine
    }

    func partial(_ contentRange: String, etag: String? = etag, extra: [HTTPHeader] = []) -> ResponseHead {
        var headers = [HTTPHeader(name: "Content-Range", value: contentRange)]
        if let etag { headers.append(HTTPHeader(name: "ETag", value: etag)) }
        return ResponseHead(status: 206, headers: headers + extra)
    }

    @Test("Only a Content-Length without Transfer-Encoding frames an answer (RFC 9112 §6.3: chunked wins)")
    func framing() {
        let length = HTTPHeader(name: "content-length", value: "1000")
        let chunked = HTTPHeader(name: "Transfer-Encoding", value: "chunked")
        #expect(partial("bytes 0-999/\(Self.total)", extra: [length]).isFramedByContentLength)
        #expect(!partial("bytes 0-999/\(Self.total)", extra: [length, chunked]).isFramedByContentLength)
        #expect(!partial("bytes 0-999/\(Self.total)", extra: [chunked]).isFramedByContentLength)
        #expect(!partial("bytes 0-999/\(Self.total)").isFramedByContentLength)
    }

    @Test("The accepted 200 is a basis for segments; the segment request carries Range and If-Range")
    func basisAndRequest() throws {
        let machine = machine()
        let basis = try #require(machine.segmentBasis())
        #expect(basis.total == Self.total && basis.probe == 0..<Self.total)
        let request = machine.segmentRequest(1000..<2000)
        #expect(request.headers.contains(HTTPHeader(name: "Range", value: "bytes=1000-1999")))
        #expect(request.headers.contains(HTTPHeader(name: "If-Range", value: Self.etag)))
    }

    @Test("No basis without a strong validator or without range support")
    func noBasis() {
        for headers in [
            [
                HTTPHeader(name: "Content-Length", value: "100"), HTTPHeader(name: "ETag", value: "W/\"weak\""),
                HTTPHeader(name: "Accept-Ranges", value: "bytes"),
            ],
            [HTTPHeader(name: "Content-Length", value: "100"), HTTPHeader(name: "ETag", value: "\"x\"")],
            [HTTPHeader(name: "ETag", value: "\"x\""), HTTPHeader(name: "Accept-Ranges", value: "bytes")],
        ] {
            var machine = ResumeStateMachine(
                url: URL(string: "http://127.0.0.1:1/f")!, headers: [], maximumRedirects: 5)
            _ = machine.nextRequest()
            _ = machine.receive(ResponseHead(status: 200, headers: headers))
            #expect(machine.segmentBasis() == nil, "\(headers)")
        }
    }

    @Test(
        "Verdicts: join exact or shorter, restart on another version, ask again otherwise (a 206 without validators too)"
    )
    func verdicts() {
        let machine = machine()
        let asked: Range<Int64> = 1000..<2000
        func verdict(_ head: ResponseHead) -> String {
            var machine = machine
            switch machine.judgeSegment(head, requested: asked) {
            case .join(let end): return "join \(end)"
            case .fileChanged: return "restart"
            case .unusable: return "unusable"
            case .overloaded: return "overloaded"
            case .refused: return "refused"
            case .fail: return "fail"
            }
        }
        #expect(verdict(partial("bytes 1000-1999/\(Self.total)")) == "join 2000")
        #expect(verdict(partial("bytes 1000-1499/\(Self.total)")) == "join 1500")
        #expect(verdict(partial("bytes 1000-2999/\(Self.total)")) == "unusable")
        #expect(verdict(partial("bytes 1001-1999/\(Self.total)")) == "unusable")
        #expect(verdict(partial("bytes 1000-1999/*")) == "unusable")
        #expect(verdict(partial("bytes 1000-1999/\(Self.total + 1)")) == "restart")
        #expect(verdict(partial("bytes 1000-1999/\(Self.total)", etag: "\"v2\"")) == "restart")
        // No validator at all (origins and caches that drop them from 206s), or one the first answer did not have,
        // shows no other version and confirms none: not joined, not a restart.
        #expect(verdict(partial("bytes 1000-1999/\(Self.total)", etag: nil)) == "unusable")
        let dated = [HTTPHeader(name: "Last-Modified", value: "Mon, 01 Jan 2024 00:00:00 GMT")]
        #expect(verdict(partial("bytes 1000-1999/\(Self.total)", etag: nil, extra: dated)) == "unusable")
        #expect(verdict(partial("bytes 1000-1999/\(Self.total)", extra: dated)) == "unusable")
        #expect(verdict(partial("bytes 1000-1999/\(Self.total)", etag: "W/\(Self.etag)")) == "restart")
        #expect(verdict(ResponseHead(status: 200, headers: [])) == "restart")
        #expect(
            verdict(
                partial(
                    "bytes 1000-1999/\(Self.total)", extra: [HTTPHeader(name: "Content-Encoding", value: "gzip")]))
                == "unusable")
        #expect(
            verdict(partial("bytes 1000-1999/\(Self.total)", extra: [HTTPHeader(name: "Content-Length", value: "5")]))
                == "unusable")
        #expect(verdict(ResponseHead(status: 200, headers: [HTTPHeader(name: "ETag", value: Self.etag)])) == "unusable")
        #expect(verdict(ResponseHead(status: 200, headers: [HTTPHeader(name: "ETag", value: "\"v2\"")])) == "restart")
        #expect(verdict(ResponseHead(status: 416, headers: [])) == "restart")
        // A 416 about a file of the same length cannot be about this range: the server failed, the file did not change.
        let unsatisfied = { (range: String, etag: String?) in
            ResponseHead(
                status: 416,
                headers: [HTTPHeader(name: "Content-Range", value: range)]
                    + (etag.map { [HTTPHeader(name: "ETag", value: $0)] } ?? []))
        }
        #expect(verdict(unsatisfied("bytes */\(Self.total)", nil)) == "unusable")
        #expect(verdict(unsatisfied("bytes */\(Self.total)", Self.etag)) == "unusable")
        #expect(verdict(unsatisfied("bytes */\(Self.total)", "\"v2\"")) == "restart")
        #expect(verdict(unsatisfied("bytes */\(Self.total - 1)", nil)) == "restart")
        #expect(verdict(unsatisfied("bytes 0-99/\(Self.total)", nil)) == "restart")
        #expect(
            verdict(ResponseHead(status: 503, headers: [HTTPHeader(name: "Retry-After", value: "1")])) == "overloaded")
        #expect(verdict(ResponseHead(status: 429, headers: [])) == "overloaded")
        #expect(verdict(ResponseHead(status: 404, headers: [])) == "refused")
        #expect(verdict(ResponseHead(status: 403, headers: [])) == "refused")
        #expect(verdict(ResponseHead(status: 302, headers: [HTTPHeader(name: "Location", value: "/m")])) == "refused")
        #expect(verdict(ResponseHead(status: 407, headers: [])) == "fail")
    }
}
