import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review through the command line: hostile local state (token files, state directories).
@Suite("Hostile local state through the CLI: token files and state directories")
struct HostileStateCLIAttackTests {
    /// Rule broken: 1 (a finished file is exactly the server's bytes) and 3 (a token never chooses what is written).
    ///
    /// Sequence: a token file handed over is named like a temporary file, `out/.resumable-<uuid>.partial`, and its
    /// `tempPath` names that very file (offset 0, `destination` null: `out/`). `resumable resume
    /// out/.resumable-<uuid>.partial`.
    ///
    /// The token file passes every check as its own temporary file (this library's naming, in the destination's
    /// directory, a regular file of this user with one link), so the download opens it, cuts it to 0 and streams
    /// into it; the CLI's `TokenFile` then writes its checkpoints to the token path (an empty regular file the user
    /// named may be replaced), renaming a token over the temporary file's name. `PartialFile.move` renames by path:
    /// the file moved into place is the last token, not the downloaded bytes.
    ///
    /// Observed: exit 0, and `out/f.bin` is the 721-byte last token; the 300,000 downloaded bytes are gone (their
    /// inode was unlinked by the first token write). Fix idea: `DownloadRunner`/`ResumeCommand` refuse a token file
    /// that is the token's own temporary file (same device and inode, or same path), and `PartialFile.move` renames
    /// only the inode it holds (check `lstat(path)` against `fstat(descriptor)` before the rename, as
    /// `removeUnownedTemporaryFiles` does).
    @Test("resume of a token file that names itself as its temporary file never finishes with the token's JSON")
    func tokenFileIsItsOwnTemporaryFile() async throws {
        let scratch = try ScratchDirectory()
        let output = try scratch.subdirectory("out")
        let served = try ServedFile(length: 300_000, path: "/f.bin", seed: 4902)
        // The head goes out, the body waits: the checkpoint of the accepted response comes before any byte.
        let gate = served.holdBody(after: 0)
        let tempName = ".resumable-\(UUID().uuidString.lowercased()).partial"
        let tempPath = output.appendingPathComponent(tempName).path
        let json: [String: Any] = [
            "version": 1, "url": served.url, "originalURL": served.url, "offset": 0, "expectedLength": served.length,
            "acceptRanges": "bytes", "tempPath": tempPath, "suggestedFilename": "f.bin",
            "destination": NSNull(), "headers": [:],
            "createdAt": "2026-11-30T03:40:00.000Z", "updatedAt": "2026-11-30T03:44:40.250Z",
        ]
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: tempPath))
        var before = stat()
        try #require(lstat(tempPath, &before) == 0)
        let inode = before.st_ino

        let resume = try CLIProcess(
            ["resume", tempPath, "-q", "--retries", "0", "--transport", "libcurl"], in: scratch.url)
        // Either the process ends (refused), or its first checkpoint replaces the file at the path.
        let replaced = try await eventually {
            var now = stat()
            return lstat(tempPath, &now) == 0 && now.st_ino != inode
        }
        gate.open()
        let result = try await resume.finish()
        let finished = output.appendingPathComponent("f.bin")
        let names = scratch.contents(of: output)
        if FileManager.default.fileExists(atPath: finished.path) {
            let contents = try Data(contentsOf: finished)
            let head = String(decoding: contents.prefix(60), as: UTF8.self)
            let isServersBytes = contents == served.bytes
            #expect(
                isServersBytes,
                "out/f.bin is not the server's bytes (\(contents.count) bytes: \(head)); replaced: \(replaced); \(names); \(result)"
            )
        } else {
            #expect(result.exitCode == 65, "\(names); \(result)")
        }
    }

    /// Rule broken: 2 (nothing downloaded is lost without need) and 3 (a token never chooses where the tool looks, a
    /// file it deletes, or what it reports finished: its `destination` is honored only when its temporary file proves
    /// it, and with `-o` the caller's destination is the one used).
    ///
    /// Sequence: `out/` holds a whole temporary file `.resumable-<uuid>.partial` (the served length) that has a second
    /// hard link, `backup/snap.partial` (a hard-link backup, `cp -al`). A token handed over names that temporary file
    /// with `offset` = `expectedLength` and, as its `destination`, the backup's link. `resumable resume TOKEN -o out/`:
    /// the placement check passes (the temporary file is in the caller's directory).
    ///
    /// Observed: exit 65, "the download already finished: its file is '…/backup/snap.partial'", and
    /// `out/.resumable-….partial` is unlinked: `out/` holds neither the finished file nor the temporary one.
    /// `Reconciliation.examine` runs `interruptedFinish` against `finalPath(token)`, the token's destination, even
    /// when the caller chose another one, and `open` then unlinks the temporary file (`strayLink`). The finalName
    /// variant of this was fixed in `FinalRoundCLIAttackTests`; the `destination` field does the same. Fix idea: with
    /// a caller destination whose directory is not the token's, skip `interruptedFinish` and `copiedIntoPlace` (or
    /// look at the caller's final path), and never unlink on the word of a path only the token named.
    @Test("resume -o of a token whose destination is a hard link of its temporary file keeps the bytes in out/")
    func tokenDestinationLinkedToTemporaryFile() async throws {
        let scratch = try ScratchDirectory()
        let output = try scratch.subdirectory("out")
        let backup = try scratch.subdirectory("backup")
        let served = try ServedFile(length: 200_000, path: "/f.bin", seed: 4903)
        let tempName = ".resumable-\(UUID().uuidString.lowercased()).partial"
        let tempPath = output.appendingPathComponent(tempName).path
        try served.bytes.write(to: URL(fileURLWithPath: tempPath))
        let snapshot = backup.appendingPathComponent("snap.partial").path
        try #require(link(tempPath, snapshot) == 0)
        let json: [String: Any] = [
            "version": 1, "url": served.url, "originalURL": served.url, "offset": served.length,
            "expectedLength": served.length, "acceptRanges": "bytes", "tempPath": tempPath,
            "suggestedFilename": "f.bin", "destination": snapshot, "headers": [:],
            "createdAt": "2026-11-30T03:40:00.000Z", "updatedAt": "2026-11-30T03:44:40.250Z",
        ]
        let tokenURL = scratch.file("f.bin.resumable.json")
        try JSONSerialization.data(withJSONObject: json).write(to: tokenURL)

        let resume = try await CLIProcess.run(
            ["resume", tokenURL.path, "-o", output.path + "/", "-q", "--retries", "0", "--transport", "libcurl"],
            in: scratch.url)
        let finished = (try? Data(contentsOf: output.appendingPathComponent("f.bin"))) == served.bytes
        let kept = FileManager.default.fileExists(atPath: tempPath) || finished
        #expect(
            kept,
            "out/ holds neither the temporary file nor the finished one: \(scratch.contents(of: output)); \(resume)")
        #expect(
            !resume.stderr.contains("already finished"),
            "a file only the token named was reported as the finished download: \(resume)")
    }
}
