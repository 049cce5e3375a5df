import Foundation
import Testing

@testable import Resumable

/// The resume state machine under hostile heads: every answer is an action or a typed error, never a trap,
/// and no action ever joins bytes that the rules forbid.
@Suite("Fuzz: resume state machine")
struct StateMachineFuzzTests {
    static let url = URL(string: "http://127.0.0.1:8080/file.bin")!

    /// A machine paused at `offset` of a representation under a strong ETag.
    static func paused(at offset: Int64, length: Int64?) -> ResumeStateMachine {
        let token = ResumeToken(
            url: url, originalURL: url, offset: offset, expectedLength: length, etag: "\"v1\"", lastModified: nil,
            responseDate: nil, acceptRanges: "bytes", tempPath: "/tmp/" + TemporaryFileName.make(),
            suggestedFilename: "file.bin", destination: nil, headers: [:], createdAt: Date(), updatedAt: Date())
        return ResumeStateMachine(
            token: token, bytesOnDisk: offset, replacingURL: nil, headers: [], maximumRedirects: 3)
    }

    @Test("Content-Range at Int64.max is refused, not an overflow trap")
    func contentRangeAtInt64Max() {
        var machine = Self.paused(at: 10, length: nil)
        _ = machine.nextRequest()
        let action = machine.receive(
            ResponseHead(
                status: 206,
                headers: [
                    HTTPHeader(name: "Content-Range", value: "bytes 10-9223372036854775807/*"),
                    HTTPHeader(name: "ETag", value: "\"v1\""),
                ]))
        guard case .skipBody(.requestAgain) = action else {
            Issue.record("expected a restart, got \(action)")
            return
        }
    }

    @Test("Random heads and bodies: an action or a typed error, and a join only at the offset under the same ETag")
    func randomExchanges() async {
        await FuzzCampaign(target: "stateMachine", cases: FuzzSettings.cases(share: 0.1)).run { values, fuzzCase in
            let offset = values.chance(0.2) ? Int64.max - Int64(values.below(3)) : values.nonNegativeInt64() % 1_000_000
            let extra = Int64(values.below(1000))
            let length: Int64? = values.chance(0.3) ? nil : (offset > Int64.max - extra ? Int64.max : offset + extra)
            var machine = Self.paused(at: offset, length: length)
            for _ in 0..<3 {
                let plan = machine.nextRequest()
                let before = machine.state
                var headers: [HTTPHeader] = []
                if values.chance(0.8) {
                    headers.append(
                        HTTPHeader(
                            name: "Content-Range",
                            value: values.headerValue(seeds: ["bytes \(offset)-\(offset &+ 9)/\(offset &+ 10)"]) {
                                $0.contentRange()
                            }))
                }
                if values.chance(0.6) {
                    headers.append(
                        HTTPHeader(name: "ETag", value: values.pick(["\"v1\"", "\"v2\"", "W/\"v1\"", values.string()])))
                }
                if values.chance(0.5) { headers.append(HTTPHeader(name: "Content-Length", value: values.numberText())) }
                if values.chance(0.2) { headers.append(HTTPHeader(name: "Location", value: values.string())) }
                if values.chance(0.1) { headers.append(HTTPHeader(name: "Retry-After", value: values.numberText())) }
                let status = values.pick([200, 203, 206, 206, 206, 416, 301, 302, 202, 204, 404, 503, 100, 999, -1])
                let action = machine.receive(ResponseHead(status: status, headers: headers))
                if case .writeBody(let body) = action {
                    let joined = body.offset > 0
                    if joined {
                        fuzzCase.check(status == 206, "joined a \(status)")
                        fuzzCase.check(
                            body.offset == plan.request.offset, "joined at \(body.offset), asked \(plan.request.offset)"
                        )
                        let etag = headers.first { $0.name == "ETag" }?.value
                        fuzzCase.check(etag == nil || etag == before.validators.etag, "joined under another ETag")
                    } else {
                        fuzzCase.check([200, 203, 206].contains(status), "wrote the body of a \(status)")
                    }
                    for _ in 0..<values.below(4) {
                        _ = try? machine.receiveBody(count: values.below(1 << 20))
                    }
                    _ = machine.responseEnded(error: values.chance(0.3) ? ResumableError(.network, "reset") : nil)
                }
            }
        }
    }
}
