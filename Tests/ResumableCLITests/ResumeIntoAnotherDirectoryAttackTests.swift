import Foundation
import LoopbackServer
import Resumable
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Attacks on the move of a resume's bytes into another directory (`resume TOKEN -o OTHER/`,
/// `DownloadTask.resume(from:destination:…)` with the temporary file elsewhere), found by helper 60.
@Suite("Resuming into another directory, attacked: a symlinked -o, two resumes of one token, no checkpoint handler")
struct ResumeIntoAnotherDirectoryAttackTests {
    private static let cut = ResumeIntoAnotherDirectoryTests.cut
    private static let patient = ResumeIntoAnotherDirectoryTests.patient

    private static func inode(_ path: String) -> ino_t? {
        var status = stat()
        return lstat(path, &status) == 0 ? status.st_ino : nil
    }

    /// `-o ALIAS/` where ALIAS is a symbolic link to the token's own directory: the relocation compared inodes (no
    /// move) while the reader compares spellings, so the tokens paired ALIAS/ with the file spelled FIRST/ and the next
    /// `resume TOKEN` refused them (exit 65). Both now follow the reader's rule: the bytes are copied under the
    /// ALIAS/ spelling, and the tokens name the copy.
    @Test("resume -o ALIAS/ (a symlink to the token's directory), interrupted, then resume TOKEN: continues")
    func resumeThroughSymlinkToSameDirectory() async throws {
        let (served, scratch, first, _, tokenURL) = try await ResumeIntoAnotherDirectoryTests.cutInFirst(
            transport: "libcurl")
        let alias = scratch.url.appendingPathComponent("alias")
        try FileManager.default.createSymbolicLink(atPath: alias.path, withDestinationPath: first.path)
        let before = scratch.partialFiles(in: first)
        try #require(before.count == 1)

        let gate = served.holdBody(after: 10_000)
        let second = try CLIProcess(["resume", tokenURL.path, "-o", alias.path + "/"] + Self.patient, in: scratch.url)
        try #require(await gate.waitUntilHeld())
        let copied = try #require(scratch.partialFiles(in: first).first { !before.contains($0) })
        let written = try await eventually {
            let size =
                try? FileManager.default.attributesOfItem(
                    atPath: first.appendingPathComponent(copied).path)[.size] as? NSNumber
            return size?.int64Value == Self.cut + 10_000
        }
        #expect(written)
        second.send(SIGINT)
        let interrupted = try await second.finish()
        try #require(interrupted.exitCode == 130, "\(interrupted)")
        let token = try ResumeToken(contentsOf: tokenURL)
        served.setBehavior(.normal)
        served.server.clearRequests()

        let third = try await CLIProcess.run(["resume", tokenURL.path, "-q"] + Self.patient, in: scratch.url)
        #expect(third.exitCode == 0, "token \(token.destination ?? "nil") / \(token.tempPath): \(third)")
        if third.exitCode == 0 {
            try expectSameBytes(Data(contentsOf: first.appendingPathComponent("file.bin")), served.bytes)
            #expect(served.ranges.first == "bytes=\(token.offset)-")
            #expect(scratch.partialFiles(in: first).isEmpty)
        }
    }

    /// Two resumes of one token into two directories: the first used to move the bytes into A/ and remove the file the
    /// token names at once, so the second no longer met the first's lock (`tokenInUse`): it found the file gone and
    /// started over from byte 0 in B/, both running at once. In one process, through the library, with the same
    /// token value.
    @Test("Two resumes of the same token into two directories: the second is refused with tokenInUse")
    func sameTokenTwoDirectoriesInOneProcess() async throws {
        let (served, scratch, _, _, tokenURL) = try await ResumeIntoAnotherDirectoryTests.cutInFirst(
            transport: "libcurl")
        let a = try scratch.subdirectory("a")
        let b = try scratch.subdirectory("b")
        let token = try ResumeToken(contentsOf: tokenURL)
        let gate = served.holdBody(after: 10_000)
        var configuration = DownloadTask.Configuration(connections: .fixed(1))
        configuration.checkpointing = .file(tokenURL)
        let one = try DownloadTask.resume(from: token, destination: .directory(a), configuration: configuration)
        defer { one.cancel() }
        var other = DownloadTask.Configuration(connections: .fixed(1))
        other.checkpointing = .file(scratch.file("other.json"))
        let refusal: ResumableError.Code?
        do {
            let two = try DownloadTask.resume(from: token, destination: .directory(b), configuration: other)
            two.cancel()
            refusal = nil
        } catch {
            refusal = error.code
        }
        #expect(refusal == .tokenInUse, "the second resume went on: \(served.ranges)")
        gate.open()
    }

    /// The same, through the CLI: `resume T -o A/` runs (held by the server); a copy of the token (kept by the user,
    /// or read by a second `resume` before the first rewrote it) resumed with `-o B/` starts the whole download again
    /// beside the first, instead of exiting 75.
    @Test("resume T -o A/ running, resume (copy of T) -o B/: exit 75, no second download")
    func sameTokenTwoDirectoriesTwoProcesses() async throws {
        let (served, scratch, _, _, tokenURL) = try await ResumeIntoAnotherDirectoryTests.cutInFirst(
            transport: "libcurl")
        let a = try scratch.subdirectory("a")
        let b = try scratch.subdirectory("b")
        let copy = scratch.file("copy.json")
        try FileManager.default.copyItem(at: tokenURL, to: copy)
        let gate = served.holdBody(after: 10_000)
        served.server.clearRequests()
        let one = try CLIProcess(["resume", tokenURL.path, "-o", a.path + "/"] + Self.patient, in: scratch.url)
        try #require(await gate.waitUntilHeld())
        let two = try CLIProcess(
            ["resume", copy.path, "-o", b.path + "/", "--retries", "0"] + Self.patient, in: scratch.url)
        // Refused at once: the first holds the file its token names.
        let twoResult = try await two.finish()
        one.send(SIGINT)
        _ = try await one.finish()
        gate.open()
        #expect(twoResult.exitCode == 75, "\(twoResult)")
        #expect(twoResult.stderr.contains("in use"), "\(twoResult.stderr)")
        #expect(served.ranges.count == 1, "\(served.ranges)")
        #expect(scratch.partialFiles(in: b).isEmpty)
    }

    /// A library caller without a checkpoint handler keeps its token itself. The move removed the file that token
    /// names at once, so a crash before the task handed out a token left the caller's token without bytes and the
    /// copy named by nothing. The old file now stays (locked) until the task ends.
    @Test("Without a checkpoint handler, the file the caller's token names stays while the resumed task runs")
    func noCheckpointHandlerLosesTheBytes() async throws {
        let (served, scratch, _, other, tokenURL) = try await ResumeIntoAnotherDirectoryTests.cutInFirst(
            transport: "libcurl")
        let token = try ResumeToken(contentsOf: tokenURL)
        // The task's own request is held, as by a process that dies before it gets any further.
        let gate = BodyGate(holdingAfter: 0)
        served.server.enqueue(behavior: Behavior(gate: gate), for: served.path)
        served.server.clearRequests()
        let task = try DownloadTask.resume(
            from: token, destination: .directory(other), configuration: .init(connections: .fixed(1)))
        try #require(await gate.waitUntilHeld())
        #expect(
            FileManager.default.fileExists(atPath: token.tempPath),
            "the file the caller's token names was removed; the copy \(scratch.partialFiles(in: other)) is unnamed")
        #expect(scratch.partialFiles(in: other).count == 1)
        // Paused, the task hands out a token naming the copy; the old file goes.
        let paused = try #require(await task.cancelProducingResumeData())
        gate.open()
        #expect(paused.tempPath.hasPrefix(other.path + "/"), "\(paused.tempPath)")
        #expect(paused.offset == Self.cut)
        #expect(!FileManager.default.fileExists(atPath: token.tempPath))
        served.server.clearRequests()
        let result = try await DownloadTask.resume(from: paused, configuration: .init(connections: .fixed(1))).value
        try expectSameBytes(Data(contentsOf: result.fileURL), served.bytes)
        #expect(result.fileURL.deletingLastPathComponent().standardizedFileURL.path == other.standardizedFileURL.path)
        #expect(served.ranges.first == "bytes=\(Self.cut)-", "downloaded again: \(served.ranges)")
    }
}
