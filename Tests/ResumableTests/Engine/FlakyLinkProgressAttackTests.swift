import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Commits 6957774 and 26133fd: a failed attempt starts the retry count again only when *that attempt alone* brought
/// `progressFloor(missing:)` bytes (64 KiB while a MiB or more is missing). A link that delivers less per connection
/// (a slow mobile link whose NAT or proxy cuts every connection after a few seconds; `resumable serve --drop-after
/// 32K`, which docs/cli.md says "clients that resume still finish, one range at a time") brings the file forward by
/// tens of KiB per attempt, every attempt, yet counts each as "no progress": the download fails after
/// `maximumRetries + 1` connections. The multi-connection phase (``SegmentSchedule``) counts bytes since its last reset,
/// across failures, and finishes the same file over the same link with `.fixed(4)`: only one connection fails.
/// And a body that brought all it was asked (a version 2 token's gap) starts the fruitless count again but never the
/// failure count: gaps that each take one cut and one completed answer fail the resume after `maximumRetries + 1`
/// gaps, every one of them filled.
@Suite("Attack: the per-attempt progress floor against a flaky link")
struct FlakyLinkProgressAttackTests {
    static let patience = Duration.seconds(120)

    func configuration(retries: Int, connections: DownloadTask.Connections = .single) -> DownloadTask.Configuration {
        var configuration = DownloadFixture.configuration(retries: retries)
        configuration.connections = connections
        configuration.deadline = Self.patience
        return configuration
    }

    @Test(
        "A link that cuts every connection after 48 KiB still finishes a 4 MiB file on one connection (5 retries)",
        arguments: [DownloadTask.Connections.single, .automatic])
    func flakyLinkFinishes(connections: DownloadTask.Connections) async throws {
        let fixture = try DownloadFixture()
        let seed: UInt64 = 6501
        let total: Int64 = 4 << 20
        fixture.serve(.generated(length: total, seed: seed, behavior: Behavior(dropAfterBytes: 48 << 10)))
        let task = try fixture.download(configuration: configuration(retries: 5, connections: connections))
        let result = await task.result
        let requests = fixture.server.requests(for: "/file.bin").count
        switch result {
        case .success(let done):
            #expect(try fixture.file(done.fileURL, holds: total, seed: seed))
        case .failure(let error):
            let message =
                "every connection brought 48 KiB, yet the download failed after \(requests) requests, "
                + "\(error.resumeToken?.offset ?? -1) of \(total) bytes on disk: \(error)"
            Issue.record("\(message)")
        }
    }

    /// A version 2 token with twenty 60 KiB gaps before a completed range that runs to the end; the link cuts each
    /// answer after 40 KiB. Each gap takes a cut (40 KiB) and then a whole answer (the last 20 KiB, all it asked).
    @Test("A version 2 token whose 60 KiB gaps each take one cut of a flaky link is still resumed to the end")
    func gapsThroughFlakyLink() async throws {
        let fixture = try DownloadFixture()
        let seed: UInt64 = 6502
        let total: Int64 = 8 << 20
        fixture.serve(.generated(length: total, seed: seed, behavior: Behavior(dropAfterBytes: 40 << 10)))
        let base = try await fixture.interruptedToken(after: 64 << 10)
        let gap: Int64 = 60 << 10
        let piece: Int64 = 4 << 10
        var ranges: [Range<Int64>] = []
        var cursor = base.offset
        for _ in 0..<19 {
            ranges.append((cursor + gap)..<(cursor + gap + piece))
            cursor += gap + piece
        }
        ranges.append((cursor + gap)..<total)
        let token = try ResumeToken(jsonData: base.listing(ranges, length: total, seed: seed).jsonData())
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token, configuration: configuration(retries: 5)).result
        let requests = fixture.server.requests(for: "/file.bin").count
        switch result {
        case .success(let done):
            #expect(try fixture.file(done.fileURL, holds: total, seed: seed))
        case .failure(let error):
            let message =
                "each gap was filled (one cut, one whole answer), yet the resume failed after \(requests) requests, "
                + "offset \(error.resumeToken?.offset ?? -1): \(error)"
            Issue.record("\(message)")
        }
    }

    /// A file whose length the server does not know (a chunked `200`, then `206`s with `bytes a-b/*`, RFC 9110 §14.4):
    /// `missing` is `nil`, so the floor stays at 64 KiB however small the file. A 100 kB file over a link that cuts
    /// each answer after 16 KiB fails after the retries, unless the attempts' bytes add up (they do: four cuts bring
    /// the floor).
    @Test("A 100 kB file of unknown length over a link that cuts every answer after 16 KiB still finishes")
    func unknownLengthFlakyLinkFinishes() async throws {
        let fixture = try DownloadFixture()
        let total = 100_000
        let cut = 16_384
        let content = testBytes(count: total, seed: 6503)
        let etag = "\"v1\""
        fixture.serve(.bytes(content, etag: etag, behavior: Behavior(chunked: true)))
        // The first answer: chunked, no length, cut after one 16 KiB chunk (no last chunk).
        fixture.server.enqueue(
            ScriptedResponse(
                status: 200,
                headers: [HeaderField("Transfer-Encoding", "chunked"), HeaderField("ETag", etag)],
                body: Array("4000\r\n".utf8) + Array(content[0..<cut]) + Array("\r\n".utf8)),
            for: "/file.bin")
        // Then each range request: a 206 of unknown complete length, cut after 16 KiB.
        var offset = cut
        while offset < total {
            let rest = total - offset
            fixture.server.enqueue(
                ScriptedResponse(
                    status: 206,
                    headers: [
                        HeaderField("Content-Range", "bytes \(offset)-\(total - 1)/*"),
                        HeaderField("Content-Length", "\(rest)"), HeaderField("ETag", etag),
                    ],
                    body: Array(content[offset...]), closeAfterBodyBytes: rest > cut ? cut : nil),
                for: "/file.bin")
            offset += cut
        }
        let task = try fixture.download(configuration: configuration(retries: 5))
        let result = await task.result
        let requests = fixture.server.requests(for: "/file.bin").count
        switch result {
        case .success(let done):
            try expectSameBytes(fixture.contents(of: done.fileURL), content)
        case .failure(let error):
            let message =
                "every answer brought 16 KiB, yet the download failed after \(requests) requests, offset "
                + "\(error.resumeToken?.offset ?? -1) of \(total): \(error)"
            Issue.record("\(message)")
        }
    }
}
