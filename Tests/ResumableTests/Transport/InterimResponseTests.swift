import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Informational 1xx responses (`100 Continue`, `102 Processing`, `103 Early Hints`) may come before the final
/// answer (RFC 9110 §15.2). Every transport skips them and hands the consumer only the final head and its body.
@Suite("Interim 1xx responses")
struct InterimResponseTests {
    static let earlyHints = InterimResponse.earlyHints(link: "</style.css>; rel=preload; as=style")

    @Test(
        "A 103 Early Hints before a 200 is skipped: the download holds exactly the server's bytes",
        arguments: TransportKind.all)
    func earlyHintsThenOK(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 300_000, seed: 11)
        fixture.serve(.bytes(content, behavior: Behavior(interimResponses: [Self.earlyHints])))
        let result = try await fixture.download().value
        #expect(result.status == 200)
        #expect(result.transport == transport)
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.server.requests(for: "/file.bin").count == 1, "no retry was needed")
        #expect(fixture.temporaryFiles().isEmpty)
    }

    @Test("A resume answered 103 then 206 continues the partial file at its offset", arguments: TransportKind.all)
    func earlyHintsThenPartialContent(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 200_000, seed: 12)
        fixture.serve(.bytes(content, behavior: Behavior(interimResponses: [Self.earlyHints])))
        // The first answer is 103, then a 200 cut after 70 000 bytes.
        fixture.server.enqueue(
            behavior: Behavior(dropAfterBytes: 70_000, interimResponses: [Self.earlyHints]), for: "/file.bin")
        let interrupted = try fixture.download(configuration: DownloadFixture.configuration(retries: 0))
        let error = try #require(await failure(of: interrupted))
        let token = try #require(error.resumeToken, "a cut body leaves a token: \(error)")
        #expect(token.offset == 70_000)

        let result = try await fixture.resumeThroughDisk(token).value
        #expect(result.status == 206)
        #expect(result.resumedAtOffset == 70_000)
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges() == [nil, "bytes=70000-"])
        #expect(fixture.temporaryFiles().isEmpty)
    }

    @Test(
        "Within one task, a retry answered 103 then 206 resumes where the cut left off",
        arguments: TransportKind.all)
    func earlyHintsOnRetry(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 150_000, seed: 13)
        fixture.serve(.bytes(content, behavior: Behavior(interimResponses: [Self.earlyHints])))
        fixture.server.enqueue(
            behavior: Behavior(dropAfterBytes: 40_000, interimResponses: [Self.earlyHints]), for: "/file.bin")
        let result = try await fixture.download().value
        #expect(result.status == 206)
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.ranges() == [nil, "bytes=40000-"])
    }

    @Test(
        "Several interim responses in a row reach the consumer as one final head, without their fields",
        arguments: TransportKind.all)
    func onlyTheFinalHeadIsDelivered(transport: TransportKind) async throws {
        let server = try LoopbackServer()
        let content = testBytes(count: 5000, seed: 14)
        let interim = [
            InterimResponse.continue,
            InterimResponse(status: 102),
            Self.earlyHints,
            InterimResponse(status: 103, headers: [HeaderField("Link", "</font.woff2>; rel=preload")]),
        ]
        server.register(.bytes(content, behavior: Behavior(interimResponses: interim)), at: "/file.bin")
        let consumer = RecordingConsumer(keepsBytes: true)
        let request = TransportRequest(
            url: server.url(for: "/file.bin"),
            headers: [HTTPHeader(name: "Accept-Encoding", value: "identity")],
            idleTimeout: .seconds(10))
        try await transport.execute(request, consumer: consumer)
        let state = consumer.state.withLock { $0 }
        #expect(state.heads == 1)
        let head = try #require(state.head)
        #expect(head.status == 200)
        #expect(head.value("Link") == nil, "fields of an interim response are not the final response's")
        #expect(head.value("Content-Length") == "5000")
        expectSameBytes(state.received, content)
    }

    @Test("A 103 before a 416 is skipped: the final status is what the engine judges", arguments: TransportKind.all)
    func earlyHintsThenRangeNotSatisfiable(transport: TransportKind) async throws {
        let server = try LoopbackServer()
        server.register(
            .bytes(testBytes(count: 100), behavior: Behavior(interimResponses: [Self.earlyHints])), at: "/file.bin")
        let consumer = RecordingConsumer()
        let request = TransportRequest(
            url: server.url(for: "/file.bin"),
            headers: [
                HTTPHeader(name: "Accept-Encoding", value: "identity"), HTTPHeader(name: "Range", value: "bytes=500-"),
            ],
            idleTimeout: .seconds(10))
        try await transport.execute(request, consumer: consumer)
        let state = consumer.state.withLock { $0 }
        #expect(state.heads == 1)
        #expect(state.head?.status == 416)
        #expect(state.head?.value("Content-Range") == "bytes */100")
    }

    @Test(
        "A connection that ends after an interim response fails with a typed error and delivers no head",
        arguments: TransportKind.all)
    func interimWithoutFinalResponse(transport: TransportKind) async throws {
        let server = try LoopbackServer()
        server.enqueue(
            ScriptedResponse(statusLine: "HTTP/1.1 103 Early Hints", headers: [HeaderField("Link", "</a.css>")]),
            for: "/file.bin")
        let consumer = RecordingConsumer()
        let request = TransportRequest(
            url: server.url(for: "/file.bin"),
            headers: [HTTPHeader(name: "Accept-Encoding", value: "identity")],
            idleTimeout: .seconds(10))
        let error = await #expect(throws: ResumableError.self) {
            try await transport.execute(request, consumer: consumer)
        }
        #expect(error?.code == .protocolViolation || error?.code == .network, "\(String(describing: error))")
        #expect(consumer.state.withLock { $0.heads } == 0)
    }
}
