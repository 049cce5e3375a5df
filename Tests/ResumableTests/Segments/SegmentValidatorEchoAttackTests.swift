import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// A server that honours `If-Range` with the strong entity tag, but leaves the validators off its `206`s (RFC 9110
/// §15.3.7 asks for them; some origins and caches drop them). The `200` carries `ETag`, `Last-Modified` and `Date`; a
/// range under a matching `If-Range` gets a correct `206` with neither `ETag` nor `Last-Modified`; any other `If-Range`
/// gets the whole file again (`200`). The file never changes.
///
/// With one connection, a resume's `206` from this server is joined (`receivePartial`: the server checked the strong
/// `If-Range`, and the validators the `206` carries, none, agree). A segment's `206` is the same answer to the same
/// kind of request (`Range` under `If-Range: <strong ETag>`), yet `judgeSegment` requires the stored ETag on it
/// (`carriesStoredValidators`) and calls it `.fileChanged(.representationChanged)`: the phase ends in a restart, the
/// probe's bytes are thrown away, the next phase does the same, and after `maximumRestarts` the download fails with
/// "the server's answers never fit together", a download one connection finishes.
final class ValidatorlessPartialServer: Sendable {
    static let total: Int64 = 8 << 20
    static let seed: UInt64 = 8501
    static let etag = "\"echo-v1\""
    static let lastModified = "Mon, 01 Jan 2024 00:00:00 GMT"

    private final class Counts: Sendable {
        let value = Mutex((whole: 0, partial: 0))
    }

    let raw: RawScriptServer
    private let shared = Counts()

    /// With `addingETag`, the other way round: the `200` has a strong Last-Modified date and no ETag, and a range under
    /// a matching `If-Range` date gets a `206` that carries that date and adds an ETag the `200` did not have.
    init(addingETag: Bool = false) throws {
        let content = testBytes(count: Int(Self.total), seed: Self.seed)
        let counts = shared
        raw = try RawScriptServer { head, _, send in
            guard head.starts(with: Array("GET ".utf8)) else { return .completed(0) }
            let dated = [
                "Accept-Ranges: bytes", "Last-Modified: \(Self.lastModified)", "Date: Tue, 02 Jan 2024 00:00:00 GMT",
            ]
            let ifRange = RawScriptServer.header("If-Range", in: head).map { String(decoding: $0, as: UTF8.self) }
            if let value = RawScriptServer.header("Range", in: head).map({ String(decoding: $0, as: UTF8.self) }),
                ifRange == nil || ifRange == (addingETag ? Self.lastModified : Self.etag), value.hasPrefix("bytes=")
            {
                let parts = value.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false)
                if parts.count == 2, let first = Int64(parts[0]), first < Self.total {
                    let last = min(Int64(parts[1]) ?? (Self.total - 1), Self.total - 1)
                    counts.value.withLock { $0.partial += 1 }
                    let response =
                        RawScriptServer.head(
                            "206 Partial Content",
                            (addingETag ? dated : ["Accept-Ranges: bytes", "Date: Tue, 02 Jan 2024 00:00:00 GMT"]) + [
                                "Content-Range: bytes \(first)-\(last)/\(Self.total)",
                                "Content-Length: \(last - first + 1)",
                            ], etag: addingETag ? Array("\"added-later\"".utf8) : nil)
                        + Array(content[Int(first)...Int(last)])
                    return send(response) ? .completed(206) : .clientLeft(0)
                }
            }
            counts.value.withLock { $0.whole += 1 }
            let response =
                RawScriptServer.head(
                    "200 OK", dated + ["Content-Length: \(Self.total)"],
                    etag: addingETag ? nil : Array(Self.etag.utf8)) + content
            return send(response) ? .completed(200) : .clientLeft(0)
        }
    }

    var url: URL { URL(string: "http://127.0.0.1:\(raw.port)/file.bin")! }
    var wholeAnswers: Int { shared.value.withLock { $0.whole } }
    var partialAnswers: Int { shared.value.withLock { $0.partial } }

    deinit { raw.stop() }
}

@Suite("Attack: a 206 without validators is the same file to one connection and a changed one to several")
struct SegmentValidatorEchoAttackTests {
    /// One connection, interrupted after 1 MiB, resumed. RFC 9110 §15.3.7 asks a 206 for the validators a 200 would
    /// carry; one without them is not joined on `If-Range`'s word (a cache that drops them may ignore `If-Range` too,
    /// and then a join splices two versions: `ValidatorlessPauseResumeAttackTests`, helper 87). The resume starts
    /// again from byte 0, in one piece. (Before this stop such a 206 was joined.)
    @Test(
        "one connection: a resume does not join a 206 without the stored validators; it starts again",
        arguments: TransportKind.all)
    func oneConnectionStartsAgain(transport: TransportKind) async throws {
        let server = try ValidatorlessPartialServer()
        let directory = try TemporaryDirectory()
        var configuration = Segmented.configuration(.fixed(1))
        configuration.transport = transport
        let token = ResumeToken.sampleForValidatorlessServer(
            url: server.url, directory: directory.url, prefix: 1 << 20)
        let prefix = testBytes(count: Int(ValidatorlessPartialServer.total), seed: ValidatorlessPartialServer.seed)
        try Data(prefix[0..<(1 << 20)]).write(to: URL(fileURLWithPath: token.tempPath))
        let task = try DownloadTask.resume(from: token, configuration: configuration)
        let result = try await task.value
        #expect(result.restarted)
        #expect(result.resumedAtOffset == 0)
        try expectSameBytes(Data(contentsOf: result.fileURL), Data(prefix))
    }

    /// Four connections, same server, same file that never changes. Observed before: every phase ended with "the file
    /// changed on the server", the probe's bytes were dropped, and the download failed after 10 restarts (11
    /// whole-file 200s). Now such a 206 is not joined and is not a changed file inside the phase; but nothing shows
    /// that this server checks `If-Range` (a cache that drops validators may ignore it, and then a 206 joined on its
    /// word splices two versions: `ValidatorlessSpliceProbeAttackTests`), so the resume that follows the phase does not
    /// join it either: one restart, then the whole file from one connection.
    @Test(
        "fixed(4): segments' 206s without validators: the exact file, at most one restart, not ten and a failure",
        arguments: TransportKind.all)
    func fourConnectionsDoNotRestart(transport: TransportKind) async throws {
        let server = try ValidatorlessPartialServer()
        let (done, events) = try await downloadWithFourConnections(from: server, transport: transport)
        #expect(events.restarts.count <= 1, "restarts: \(events.restarts)")
        #expect(server.wholeAnswers <= 2, "the whole file was sent \(server.wholeAnswers) times")
        #expect(done != nil)
    }

    /// The first answer has a strong Last-Modified date and no ETag; the 206s add an ETag. No validator differs, none
    /// confirms the file for a segment: not joined, and not a changed file inside the phase (every phase used to
    /// restart, and the download failed after ten). The phase ends and one connection goes on; its resume does not
    /// join such a 206 either: one restart, then the exact file.
    @Test("fixed(4): 206s that add an ETag: the exact file, at most one restart", arguments: TransportKind.all)
    func addedETag(transport: TransportKind) async throws {
        let server = try ValidatorlessPartialServer(addingETag: true)
        let (_, events) = try await downloadWithFourConnections(from: server, transport: transport)
        #expect(events.restarts.count <= 1, "restarts: \(events.restarts)")
        #expect(server.wholeAnswers <= 2, "the whole file was sent \(server.wholeAnswers) times")
        #expect(server.partialAnswers >= 1, "no segment was asked: the test shows nothing")
    }

    /// Downloads the server's file with `fixed(4)`; records an issue unless it ends with exactly the server's bytes.
    private func downloadWithFourConnections(
        from server: ValidatorlessPartialServer, transport: TransportKind
    ) async throws -> (DownloadResult?, EventLog) {
        let directory = try TemporaryDirectory()
        let events = EventLog()
        var configuration = Segmented.configuration(.fixed(4), events: events)
        configuration.transport = transport
        let task = try DownloadTask(
            url: server.url, destination: .directory(directory.url), configuration: configuration)
        switch await task.result {
        case .success(let done):
            #expect(
                try Data(contentsOf: done.fileURL)
                    == Data(
                        testBytes(count: Int(ValidatorlessPartialServer.total), seed: ValidatorlessPartialServer.seed)))
            return (done, events)
        case .failure(let error):
            Issue.record("a download one connection finishes failed with four: \(error)")
            return (nil, events)
        }
    }
}

extension ResumeToken {
    /// A version 1 token for ``ValidatorlessPartialServer``: `prefix` bytes in a temporary file in `directory`.
    static func sampleForValidatorlessServer(url: URL, directory: URL, prefix: Int64) -> ResumeToken {
        let tempPath = directory.appendingPathComponent(TemporaryFileName.make()).path
        return ResumeToken(
            url: url, originalURL: url, offset: prefix, completedRanges: [],
            expectedLength: ValidatorlessPartialServer.total, etag: ValidatorlessPartialServer.etag,
            lastModified: "Mon, 01 Jan 2024 00:00:00 GMT", responseDate: "Tue, 02 Jan 2024 00:00:00 GMT",
            acceptRanges: "bytes", tempPath: tempPath, suggestedFilename: "file.bin", destination: nil,
            finalName: nil, headers: [:], createdAt: Date(), updatedAt: Date())
    }
}
