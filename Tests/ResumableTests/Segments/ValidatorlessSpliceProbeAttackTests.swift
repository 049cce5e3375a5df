import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Adversarial review (helper 86) of 622a145 (a segment's 206 without validators is "unusable", not a restart).
///
/// The server: a plain GET gets a 200 of version 1 with a strong ETag (head and first MiB at once, the rest once it
/// has answered a range: an event, not a delay); every range request gets a 206 of version 2 (same length),
/// without ETag or Last-Modified, whatever its If-Range says: a file replaced at the origin behind a cache that drops
/// validators from 206s and does not evaluate If-Range.
final class ValidatorlessSwapServer: Sendable {
    static let total: Int64 = 8 << 20
    static let etag = "\"swap-v1\""
    let raw: RawScriptServer
    private final class Count: Sendable { let value = Atomic<Int>(0) }

    init() throws {
        let partials = Count()
        let one = testBytes(count: Int(Self.total), seed: 8690)
        let two = testBytes(count: Int(Self.total), seed: 8691)
        raw = try RawScriptServer { head, _, send in
            guard head.starts(with: Array("GET ".utf8)) else { return .completed(0) }
            if let value = RawScriptServer.header("Range", in: head).map({ String(decoding: $0, as: UTF8.self) }),
                value.hasPrefix("bytes=")
            {
                let parts = value.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false)
                if parts.count == 2, let first = Int64(parts[0]), first < Self.total {
                    let last = min(Int64(parts[1]) ?? (Self.total - 1), Self.total - 1)
                    partials.value.add(1, ordering: .sequentiallyConsistent)
                    let response =
                        RawScriptServer.head(
                            "206 Partial Content",
                            [
                                "Accept-Ranges: bytes", "Date: Tue, 02 Jan 2024 00:00:00 GMT",
                                "Content-Range: bytes \(first)-\(last)/\(Self.total)",
                                "Content-Length: \(last - first + 1)",
                            ]) + Array(two[Int(first)...Int(last)])
                    return send(response) ? .completed(206) : .clientLeft(0)
                }
            }
            // The head and the first MiB, then the rest once a range has been answered: the segments are under way
            // (an event, not a delay; 30 s only bounds a client that never asks a range).
            let head =
                RawScriptServer.head(
                    "200 OK",
                    [
                        "Accept-Ranges: bytes", "Last-Modified: Mon, 01 Jan 2024 00:00:00 GMT",
                        "Date: Tue, 02 Jan 2024 00:00:00 GMT", "Content-Length: \(Self.total)",
                    ], etag: Array(Self.etag.utf8))
            guard send(head + Array(one[0..<(1 << 20)])) else { return .clientLeft(0) }
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(30)
            while partials.value.load(ordering: .sequentiallyConsistent) == 0, clock.now < deadline { usleep(1000) }
            return send(Array(one[(1 << 20)...])) ? .completed(200) : .clientLeft(0)
        }
    }

    var url: URL { URL(string: "http://127.0.0.1:\(raw.port)/file.bin")! }
    deinit { raw.stop() }
}

@Suite("Attack: validator-less 206s of another version under several connections")
struct ValidatorlessSpliceProbeAttackTests {
    /// Rule 1: never splice two versions. With one connection this download is one 200 and the file is version 1.
    /// With fixed(4), every segment's 206 is now `unusable` ("carries no validator to confirm the file"), the phase
    /// falls back to one connection, which continues from the end of the first connection's prefix with a Range
    /// under If-Range and joins the validator-less 206 (`receivePartial`, which trusts the If-Range it sent).
    ///
    /// Observed (both transports, urlSession every run, libcurl most runs): the download succeeds and the file is
    /// version 1 up to 2 MiB or 4 MiB and version 2 after. Before 622a145 the same 206s were a changed file
    /// (restart), never joined. Cause: `ResumeStateMachine.judgeSegment` (`Sources/Resumable/Resume/
    /// ResumeStateMachine.swift:660`) turns "no validator" into `.unusable`, whose fallback hands the rest to the
    /// single-connection rules, which accept a validator-less 206 on the strength of an If-Range nothing shows was
    /// evaluated; a segment phase, unlike one connection, needs range requests even when nothing was interrupted.
    @Test("fixed(4): never a file of two versions", arguments: TransportKind.all)
    func neverSpliced(transport: TransportKind) async throws {
        let server = try ValidatorlessSwapServer()
        let directory = try TemporaryDirectory()
        var configuration = Segmented.configuration(.fixed(4))
        configuration.transport = transport
        let task = try DownloadTask(
            url: server.url, destination: .directory(directory.url), configuration: configuration)
        let result = await task.result
        switch result {
        case .success(let done):
            let saved = try Data(contentsOf: done.fileURL)
            let one = Data(testBytes(count: Int(ValidatorlessSwapServer.total), seed: 8690))
            let two = Data(testBytes(count: Int(ValidatorlessSwapServer.total), seed: 8691))
            let firstDiff = Array(zip(saved, one)).firstIndex { $0.0 != $0.1 } ?? -1
            #expect(saved == one || saved == two, "spliced: differs from version 1 at \(firstDiff)")
        case .failure(let error):
            // Failing without a file keeps rule 1.
            _ = error
        }
    }
}
