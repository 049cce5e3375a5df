import Foundation
import LoopbackServer
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review of the day's fixes in the library: `FinalPathClaims`, `TaskStore.load()`'s re-homing, the
/// `finalName` token field.
@Suite("Today's fixes under attack: the queue")
struct TodayFixesAttackTests {
    /// Rule broken: no hang, no trap, and no giving up wrongly (rule 4); `ExistingFilePolicy.fail` "keeps the
    /// temporary file and the token", so the download can be finished once the name is free.
    ///
    /// Sequence: a queue with `existingFile: .fail` downloads `/f.bin` into a directory where someone else's `f.bin`
    /// is: it fails with `destinationExists`, its token kept (the queue lists it as failed). The user moves the other
    /// file away and calls `queue.resume(id)`: the bytes are all on disk and the name is free.
    ///
    /// Observed: it fails again, "'…/f.bin' is another download's of the same queue", and keeps failing for the
    /// queue's whole life: the first attempt's `FinalPathClaims.claim` (in `Finisher.moveIntoPlace`, before the
    /// move that failed) is never released, so the download's own earlier claim is taken for another download's
    /// file. (With `.overwrite` or `.chooseFreeName` the same stale claim sends the file to `f (1).bin` although
    /// `f.bin` is free.)
    @Test("A download that failed on a taken name under .fail finishes once the name is free and it is resumed")
    func failPolicyRetryAfterNameFreed() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 20_000, seed: 4210)
        let url = fixture.serve(.bytes(bytes), at: "/f.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let existing = output.appendingPathComponent("f.bin")
        try Data("someone else's file".utf8).write(to: existing)
        let queue = DownloadQueue(
            configuration: .init(
                maximumConcurrentDownloads: 1, download: DownloadFixture.configuration(existingFile: .fail)))
        let id = try await queue.add(url, destination: .directory(output))
        let first = await queue.waitUntilIdle()
        try #require(first.failed == 1, "\(first)")
        let item = try #require(await queue.items.first { $0.id == id }, "the failed download left the queue")
        guard case .failed(let error) = item.state else {
            Issue.record("expected a failed download, got \(item.state)")
            return
        }
        try #require(error.code == .destinationExists, "\(error)")

        try FileManager.default.removeItem(at: existing)
        await queue.resume(id)
        let second = await queue.waitUntilIdle()
        let state = await queue.items.first { $0.id == id }?.state
        #expect(second.finished == 1, "\(second); the download is now \(String(describing: state))")
        expectSameBytes((try? Data(contentsOf: existing)), Data(bytes), "the finished file is not under its own name")
    }

    /// The same stale claim with the default policy: the file goes to `f (1).bin` although `f.bin` is free again.
    /// Not a lost byte, but the name the user asked for is refused by nothing on disk.
    @Test("A download whose first finish failed gets its own name, not a free one, when it finishes later")
    func chooseFreeNameAfterFailedMove() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 20_000, seed: 4211)
        let url = fixture.serve(.bytes(bytes), at: "/g.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        // The first move fails: the name is a directory, which no rename replaces.
        let wanted = output.appendingPathComponent("g.bin")
        try FileManager.default.createDirectory(at: wanted, withIntermediateDirectories: true)
        try Data("x".utf8).write(to: wanted.appendingPathComponent("inside"))
        let queue = DownloadQueue(
            configuration: .init(
                maximumConcurrentDownloads: 1, download: DownloadFixture.configuration(existingFile: .overwrite)))
        let id = try await queue.add(url, destination: .directory(output))
        let first = await queue.waitUntilIdle()
        try #require(first.failed == 1, "\(first)")
        try #require(await queue.items.contains { $0.id == id }, "the failed download left the queue")

        try FileManager.default.removeItem(at: wanted)
        await queue.resume(id)
        let second = await queue.waitUntilIdle()
        #expect(second.finished == 1, "\(second)")
        #expect(
            (try? Data(contentsOf: wanted)) == Data(bytes),
            "the file went elsewhere: \((try? FileManager.default.contentsOfDirectory(atPath: output.path)) ?? [])")
    }
}
