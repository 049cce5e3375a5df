import Foundation
import LoopbackServer
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review of `5201407`: `finalName` as any plain file name, and claims keyed by the resolved directory
/// (with the last resolution cached).
@Suite("Final round under attack: finalName and resolved claims")
struct FinalRoundAttackTests {
    static func configuration(existingFile: DownloadTask.ExistingFilePolicy = .chooseFreeName)
        -> DownloadTask.Configuration
    {
        var configuration = DownloadFixture.configuration(
            retries: 2, existingFile: existingFile, transport: .libcurl)
        configuration.connections = .single
        return configuration
    }

    /// Rule broken: 1 (nothing the batch saved is replaced), as `ManyDownloads.md` states it for `.overwrite`
    /// ("also through a symbolic link to the same directory").
    ///
    /// Sequence: a queue without a store, `.overwrite`, one download at a time. `link` is a symbolic link to `out-a`.
    /// Download A finishes to `out-b/x.bin`. Download B finishes to `link/y.bin` (into `out-a`). The user points
    /// `link` at `out-b` (retargets the link, as `ln -sfn` does). Download C (another server's `x.bin`) finishes to
    /// `link/x.bin`, which is now `out-b/x.bin`, A's file.
    ///
    /// Observed: C's move replaces A's file; A's bytes are gone though the queue reported all three finished.
    /// `FinalPathClaims.resolve` caches the last directory's resolution by its spelling (`link` → `out-a`), so C's
    /// claim is keyed `out-a/x.bin`, which nobody holds, and the `.overwrite where ours` move replaces. Without the
    /// cache, `realpath` gives `out-b` and the claim A holds sends C to a free name.
    @Test("A link retargeted during a batch: the cached resolution lets overwrite replace the queue's own file")
    func staleDirectoryResolutionLetsOverwriteReplace() async throws {
        let fixture = try DownloadFixture(transport: .libcurl)
        defer { fixture.server.shutdown() }
        let bytesA = testBytes(count: 30_000, seed: 4601)
        let bytesB = testBytes(count: 31_000, seed: 4602)
        let bytesC = testBytes(count: 32_000, seed: 4603)
        let urlA = fixture.serve(.bytes(bytesA), at: "/a/x.bin")
        let urlB = fixture.serve(.bytes(bytesB), at: "/b/y.bin")
        let urlC = fixture.serve(.bytes(bytesC), at: "/c/x.bin")
        let root = fixture.directory.url
        let outA = root.appendingPathComponent("out-a")
        let outB = root.appendingPathComponent("out-b")
        try FileManager.default.createDirectory(at: outA, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: outB, withIntermediateDirectories: true)
        let link = root.appendingPathComponent("link")
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: outA.path)
        let queue = DownloadQueue(configuration: .init(download: Self.configuration(existingFile: .overwrite)))

        _ = try await queue.add(urlA, destination: .file(outB.appendingPathComponent("x.bin")))
        let one = await queue.waitUntilIdle()
        try #require(one.finished == 1, "\(one)")
        _ = try await queue.add(urlB, destination: .file(link.appendingPathComponent("y.bin")))
        let two = await queue.waitUntilIdle()
        try #require(two.finished == 2, "\(two)")
        try requireSameBytes(fixture.contents(of: outA.appendingPathComponent("y.bin")), bytesB)

        // `ln -sfn out-b link`: the link now reaches out-b.
        try FileManager.default.removeItem(atPath: link.path)
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: outB.path)

        _ = try await queue.add(urlC, destination: .file(link.appendingPathComponent("x.bin")))
        let three = await queue.waitUntilIdle()
        try #require(three.finished == 3, "\(three)")

        let names = try FileManager.default.contentsOfDirectory(atPath: outB.path).sorted()
        let contents = try names.map { try fixture.contents(of: outB.appendingPathComponent($0)) }
        let keptA = contents.contains(bytesA)
        let keptC = contents.contains(bytesC)
        #expect(keptA, "A's file was replaced by another download of the same queue: \(names)")
        #expect(keptC, "\(names)")
    }

    /// Rule broken: 2 (nothing downloaded is lost without need) and 3 (outside data never makes the tool delete
    /// what the user didn't choose; a wrong file is reported finished).
    ///
    /// Sequence: a whole temporary file `out/.resumable-<uuid>.partial` (1 MiB, the token's full length) that has a
    /// second hard link elsewhere (a hard-link backup such as `cp -al` or rsnapshot makes one). Its token (read back
    /// through the decoder, as `resume` reads one) names as `finalName` the temporary file's own name, which the
    /// decoder now accepts (a plain name: `.resumable-….partial` was refused by the server-name rules before).
    /// `DownloadTask.resume(from:)` with it.
    ///
    /// Observed: the resume reports "the download already finished: its file is '…/.resumable-….partial'" and
    /// unlinks that very file: the whole download is gone from `out/`, and the "finished file" it names does not
    /// exist. `Reconciliation.interruptedFinish` takes two names for one inode as a `link`-then-`unlink` finish
    /// interrupted, and compares the temporary file with `finalPath(token)`, which here is the temporary file itself:
    /// the same inode trivially.
    @Test("finalName naming the token's own temporary file: resume neither reports it finished nor unlinks it")
    func finalNameOfOwnTemporaryFile() async throws {
        let scratch = try TemporaryDirectory()
        let output = scratch.url.appendingPathComponent("out")
        let backup = scratch.url.appendingPathComponent("backup")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: backup, withIntermediateDirectories: true)
        let tempName = TemporaryFileName.make()
        let tempPath = output.appendingPathComponent(tempName).path
        let bytes = testBytes(count: 1 << 20, seed: 4604)
        try Data(bytes).write(to: URL(fileURLWithPath: tempPath))
        try #require(link(tempPath, backup.appendingPathComponent("snapshot.partial").path) == 0)

        let written = ResumeToken.sample(
            tempPath: tempPath, offset: 1 << 20, destination: output.appendingPathComponent("f.bin").path,
            finalName: tempName)
        let tokenURL = scratch.url.appendingPathComponent("f.bin.token")
        try written.jsonData().write(to: tokenURL)
        // Fixed by refusing such a token when it is read: a finished file is never named like a temporary file.
        let refused = #expect(throws: ResumableError.self) { try ResumeToken(contentsOf: tokenURL) }
        #expect(
            refused?.code == .invalidToken && refused?.message.contains("finalName") == true,
            "\(String(describing: refused))")

        // And a token built in memory with that name (no decoder in between) is not taken as finished either.
        var message = "resumed"
        do {
            let task = try DownloadTask.resume(from: written, configuration: Self.configuration())
            // A pause, not a cancel: a cancel discards the temporary file by design.
            _ = await task.cancelProducingResumeData()
        } catch {
            message = error.message
        }
        #expect(FileManager.default.fileExists(atPath: tempPath), "the whole temporary file was unlinked: \(message)")
        #expect(
            !message.contains("already finished"),
            "the temporary file itself was reported as the finished file: \(message)")
    }
}
