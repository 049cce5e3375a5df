import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Adversarial review (helper 86) of 622a145 (a segment's 206 without validators is "unusable", not a restart),
/// against a ``ValidatorlessCacheServer``: a file replaced at the origin behind a cache that drops validators from
/// 206s and does not evaluate If-Range.
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
        let server = try ValidatorlessCacheServer(seeds: (8690, 8691), etag: "\"swap-v1\"")
        let directory = try TemporaryDirectory()
        var configuration = Segmented.configuration(.fixed(4))
        configuration.transport = transport
        let task = try DownloadTask(
            url: server.url, destination: .directory(directory.url), configuration: configuration)
        let result = await task.result
        switch result {
        case .success(let done):
            let splice = server.splice(in: Array(try Data(contentsOf: done.fileURL)))
            #expect(splice == nil, "spliced: \(splice ?? "")")
        case .failure(let error):
            // Failing without a file keeps rule 1.
            _ = error
        }
    }
}
