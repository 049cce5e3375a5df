import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Rule 3 (a token never hangs the process) on a token a writer may legitimately hand out: a version 2 token with
/// the most ranges the reader accepts (``ResumeToken/maximumRangeCount``, 4096, one byte each, a byte apart), resumed
/// with one connection (`--connections 1`; also the CLI's default `auto` whenever less than 16 MiB is missing).
///
/// The resume asks each gap in turn, 4097 small requests: on loopback a few milliseconds each, about as long as four
/// or sixteen connections take for the same token (measured: 4097 requests in 12 s with `--connections 16`). Observed:
/// each filled gap costs ~0.85 s of CPU at the start (debug build), falling as ranges are absorbed, so the resume
/// runs for many minutes (1024 ranges: 17.7 s; 512: 3.3 s; 64: 0.17 s, roughly cubic in the range count).
///
/// Cause: filling a gap calls `ResumeState.absorbCompletedRanges()`, which rebuilds the set with
/// `ByteRangeSet.init(_:)`, one `insert` per range; an insert of a range after the last one misses the in-place fast
/// path (`firstIndex(where:)`, a scan of every range) and rebuilds the whole array, so building a set of n sorted
/// ranges costs O(n²) time and allocates n arrays of up to n ranges; once per gap, O(n³) per resume.
@Suite("Attack: a token with the most ranges, resumed with one connection")
struct ManyRangesOneConnectionAttackTests {
    static let total = Segmented.total

    @Test("A version 2 token with 4096 one-byte ranges resumes with one connection in about the time the requests take")
    func manyRangesOneConnection() async throws {
        let fixture = try DownloadFixture()
        let seed: UInt64 = 8502
        let token = try await SegmentCrashAttackTests().tokenWithMaximumRanges(fixture, seed: seed)
        #expect(token.completedRanges.count == ResumeToken.maximumRangeCount)
        var configuration = Segmented.configuration(.fixed(1))
        // 4097 loopback requests take seconds alone, and over a minute in a parallel run on a loaded machine (two
        // full runs failed at 90 s with 2028 requests answered); the cubic cost above took about 19 minutes. A
        // deadline between the two ends the test with a token, not a hang, and tells them apart.
        configuration.deadline = .seconds(240)
        let started = ContinuousClock.now
        let task = try fixture.resumeThroughDisk(token, configuration: configuration)
        let result = await task.result
        let elapsed = ContinuousClock.now - started
        let requests = fixture.server.requests(for: Segmented.path).count
        switch result {
        case .success(let done):
            #expect(try fixture.file(done.fileURL, holds: Self.total, seed: seed))
        case .failure(let error):
            Issue.record(
                "the resume did not finish within 240 s (\(requests) requests answered, \(elapsed)): \(error)")
        }
    }
}
