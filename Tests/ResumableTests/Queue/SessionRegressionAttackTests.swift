import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Adversarial review of this session's finishing rules (`197add2..`): claims of final paths within a queue, the
/// `finalName` a last token announces, and restores of what a crash leaves.
@Suite("Session regressions under attack: finishing, claims and free names")
struct SessionRegressionAttackTests {
    static func configuration(existingFile: DownloadTask.ExistingFilePolicy = .chooseFreeName)
        -> DownloadTask.Configuration
    {
        var configuration = DownloadFixture.configuration(
            retries: 2, existingFile: existingFile, transport: .libcurl)
        configuration.connections = .single
        return configuration
    }

    /// Rule broken: 2 (nothing downloaded is lost without need) and 4 (no giving up wrongly); rule 1 (nothing
    /// downloaded twice).
    ///
    /// Sequence: a queue on a store, `.chooseFreeName`, one download to the exact file `out/.env` (a dot file, which
    /// the library accepts as a `.file` destination). `out/.env` already exists (the user's), so the finished file
    /// goes to a free name, `.env (1)`, and the last token announces it (`finalName`). A hook copies the record on
    /// disk at the instant the file is in place and the record not yet removed (what `kill -9` there leaves); it is
    /// written back after the queue is released, and a new queue restores the store.
    ///
    /// Observed: the restore reports the record as a problem ("finalName is not a safe file name") and leaves it:
    /// the finished download is never recognized, `resumable resume --state` would exit 65 for ever. The free name
    /// the Finisher makes (`SuggestedFilename.available` on the destination's own name) is not one that
    /// `SuggestedFilename.sanitize` keeps unchanged (it trims the leading dot), but `ResumeToken`'s decoder refuses
    /// any `finalName` that `sanitize` changes: the token the library itself wrote cannot be read back.
    @Test("A crash after a dot-file destination's move to a free name: the restore finds it finished")
    func dotFileFreeNameRecordReadsBack() async throws {
        let fixture = try DownloadFixture(transport: .libcurl)
        defer { fixture.server.shutdown() }
        let bytes = testBytes(count: 300_000, seed: 4501)
        let url = fixture.serve(.bytes(bytes), at: "/env")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let target = output.appendingPathComponent(".env")
        let theirs = Data("SECRET=mine\n".utf8)
        try theirs.write(to: target)
        let state = fixture.directory.url.appendingPathComponent("state")

        let atCrash = Mutex<Data?>(nil)
        var hooks = DownloadQueue.Hooks()
        hooks.beforeFinishedRecordRemoved = { id in
            let file = state.appendingPathComponent("tasks/\(id).json").path
            atCrash.withLock { $0 = FileManager.default.contents(atPath: file) }
        }
        var store: TaskStore? = try TaskStore(directory: state)
        var queue: DownloadQueue? = DownloadQueue(
            configuration: .init(download: Self.configuration()), store: store, hooks: hooks)
        let id = try await queue!.add(url, destination: .file(target))
        let recordFile = state.appendingPathComponent("tasks/\(id).json").path
        let summary = await queue!.waitUntilIdle()
        try #require(summary.finished == 1, "\(summary)")
        let saved = output.appendingPathComponent(".env (1)")
        try expectSameBytes(fixture.contents(of: saved), bytes)
        let finalRecord = try #require(atCrash.withLock { $0 }, "the record was not on disk at the crash point")
        queue = nil
        store = nil
        let requestsBefore = fixture.server.requests(for: "/env").count

        // kill -9 after the move, before the record's removal reached the disk.
        try finalRecord.write(to: URL(fileURLWithPath: recordFile))
        let reopened = try #require(
            await reopenedStore(at: state), "the store is still held after its queue was released")
        let next = DownloadQueue(configuration: .init(download: Self.configuration()), store: reopened)
        let problems = await next.restore()
        #expect(problems.isEmpty, "\(problems.map { $0.error.message })")
        let after = await next.waitUntilIdle()
        #expect(after.finished == 1, "the restored download was not reported finished: \(after)")
        #expect(fixture.server.requests(for: "/env").count == requestsBefore, "the finished file was fetched again")
        #expect(!FileManager.default.fileExists(atPath: recordFile), "the finished download's record stayed")
        try expectSameBytes(Data(contentsOf: target), theirs)
        try expectSameBytes(fixture.contents(of: saved), bytes)
    }

    /// Rule broken: 4 (no giving up wrongly); `.fail` is documented as failing "when the finished file's name is
    /// already taken" (``DownloadTask/ExistingFilePolicy/fail``).
    ///
    /// Sequence: a queue WITHOUT a store (no claims file; before this session it behaved like a plain
    /// `DownloadTask`), `.fail`, a download to the exact file `out/feed.xml`. It finishes. The application takes the
    /// file away (moves it into its library: `out/feed.xml` no longer exists). Later, in the same queue, the next
    /// version is downloaded to `out/feed.xml`.
    ///
    /// Observed: the second download fails with `destinationExists` ("'…/feed.xml' is another download's of the
    /// same queue"), though nothing is at that path. The first download's claim (`FinalPathClaims`) lives as long as
    /// the queue and is never checked against the disk: it blocks the name after the file it protected is gone. With
    /// `.chooseFreeName` the same second download goes to `feed (1).xml` although `feed.xml` is free.
    @Test("A queue without a store and .fail: a name whose file the user removed is not refused")
    func failPolicyAfterFileRemoved() async throws {
        let fixture = try DownloadFixture(transport: .libcurl)
        defer { fixture.server.shutdown() }
        let first = testBytes(count: 40_000, seed: 4502)
        let second = testBytes(count: 41_000, seed: 4503)
        let urlFirst = fixture.serve(.bytes(first), at: "/v1/feed.xml")
        let urlSecond = fixture.serve(.bytes(second), at: "/v2/feed.xml")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let target = output.appendingPathComponent("feed.xml")
        let queue = DownloadQueue(configuration: .init(download: Self.configuration(existingFile: .fail)))

        _ = try await queue.add(urlFirst, destination: .file(target))
        let one = await queue.waitUntilIdle()
        try #require(one.finished == 1, "\(one)")
        try requireSameBytes(fixture.contents(of: target), first)
        // The application consumes the file.
        try FileManager.default.moveItem(at: target, to: fixture.directory.url.appendingPathComponent("library.xml"))

        let idSecond = try await queue.add(urlSecond, destination: .file(target))
        let two = await queue.waitUntilIdle()
        let state = await queue.items.first { $0.id == idSecond }.map { "\($0.state)" } ?? "gone"
        #expect(two.finished == 2 && two.failed == 0, "\(two); second: \(state)")
        expectSameBytes((try? fixture.contents(of: target)), second, "second: \(state)")
    }

    /// Rule broken: 1 (nothing the batch saved is replaced), as `ManyDownloads.md` states it for `.overwrite`: "never
    /// one another download of the queue saved".
    ///
    /// Sequence: a queue without a store, `.overwrite`. Download A to `.directory(out)`, download B (another server's
    /// file of the same name, `x.bin`) to `.directory(alias)`, where `alias` is a symbolic link to `out` (a common
    /// way the same folder is reached by two paths). A finishes, then B.
    ///
    /// Observed: B's move replaces A's `out/x.bin`; A's bytes are gone though the queue reported both finished.
    /// `FinalPathClaims` compares the destination paths as given (`Destination` only standardizes, it does not
    /// resolve links), so `alias/x.bin` is not seen as the path A claimed. (`TaskStore.holds` does resolve links.)
    @Test("Two downloads of one queue reaching one directory through a symbolic link both keep their files")
    func overwriteThroughAliasKeepsBothFiles() async throws {
        let fixture = try DownloadFixture(transport: .libcurl)
        defer { fixture.server.shutdown() }
        let bytesA = testBytes(count: 30_000, seed: 4504)
        let bytesB = testBytes(count: 31_000, seed: 4505)
        let urlA = fixture.serve(.bytes(bytesA), at: "/a/x.bin")
        let urlB = fixture.serve(.bytes(bytesB), at: "/b/x.bin")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let alias = fixture.directory.url.appendingPathComponent("alias")
        try FileManager.default.createSymbolicLink(atPath: alias.path, withDestinationPath: output.path)
        let queue = DownloadQueue(configuration: .init(download: Self.configuration(existingFile: .overwrite)))

        _ = try await queue.add(urlA, destination: .directory(output))
        let one = await queue.waitUntilIdle()
        try #require(one.finished == 1, "\(one)")
        _ = try await queue.add(urlB, destination: .directory(alias))
        let two = await queue.waitUntilIdle()
        try #require(two.finished == 2, "\(two)")

        let names = try FileManager.default.contentsOfDirectory(atPath: output.path).sorted()
        let contents = try names.map { try fixture.contents(of: output.appendingPathComponent($0)) }
        #expect(contents.contains(bytesA), "A's file was replaced by another download of the same queue: \(names)")
        #expect(contents.contains(bytesB), "\(names)")
    }
}
