import Foundation
import Testing

@testable import Resumable

extension DownloadFixture {
    /// Downloads `/file.bin` (resource `seed`, `total` bytes) against the answers already queued on the server, with
    /// five retries 1 ms apart and a deadline that bounds an endless crawl, and holds it to the bound every attack on
    /// the progress floor is judged by: at most `limit` requests (a server capping each `206` at 4 KiB needs 256 for
    /// 1 MiB; twice that is generous), and, when it finishes, exactly the server's bytes. `attack` says what the server
    /// did, for the message.
    func expectBoundedCrawl(
        total: Int64, seed: UInt64, attack: String, limit: Int = 512, patience: Duration = .seconds(300)
    ) async throws {
        var configuration = DownloadFixture.configuration(retries: 5)
        configuration.retry = .init(maximumRetries: 5, initialDelay: .milliseconds(1), maximumDelay: .milliseconds(1))
        configuration.deadline = patience
        let result = try await download(configuration: configuration).result
        let requests = server.requests(for: "/file.bin").count
        switch result {
        case .success(let done):
            #expect(try file(done.fileURL, holds: total, seed: seed))
            #expect(requests <= limit, "\(attack), yet the download went on for \(requests) requests and finished")
        case .failure(let error):
            #expect(
                requests <= limit,
                "\(attack): failed only after \(requests) requests, offset \(error.resumeToken?.offset ?? -1): \(error)"
            )
        }
    }
}
