import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review of `5201407` through the command line: `finalName` as any plain file name.
@Suite("Final round under attack: finalName through resume and inspect")
struct FinalRoundCLIAttackTests {
    /// Rule broken: 2 (nothing downloaded is lost without need) and 3 (a token never makes the tool delete what the
    /// user didn't choose; a wrong file is reported finished).
    ///
    /// Sequence: `out/` holds a whole temporary file `.resumable-<uuid>.partial` (the served file's full length)
    /// with a second hard link in `backup/` (a hard-link backup, `cp -al`, made one). A token handed over names it
    /// with `offset` = `expectedLength` and, as `finalName`, the temporary file's own name, which the reader accepts
    /// since `5201407` (a plain name; the server-name rules refused the leading dot before). `resumable inspect
    /// TOKEN`, then `resumable resume TOKEN`.
    ///
    /// Observed: `inspect` says "gone: the download already finished ('…/.resumable-….partial')", and `resume`
    /// exits 65 with "the download already finished: its file is '…/.resumable-….partial'" after unlinking that
    /// file: `out/` holds neither the finished file nor the temporary one. `Reconciliation.interruptedFinish` sees
    /// the temporary file with two links and the same inode at `finalPath(token)`, which is the temporary file
    /// itself.
    @Test("resume of a token whose finalName is its own temporary file keeps the bytes and reports no finish")
    func finalNameOfOwnTemporaryFile() async throws {
        let scratch = try ScratchDirectory()
        let output = try scratch.subdirectory("out")
        let backup = try scratch.subdirectory("backup")
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let length: Int64 = 200_000
        let bytes = Resource.generatedBytes(seed: 4611, range: 0..<length)
        server.register(.bytes(bytes), at: "/f.bin")
        let tempName = ".resumable-\(UUID().uuidString.lowercased()).partial"
        let tempPath = output.appendingPathComponent(tempName).path
        try Data(bytes).write(to: URL(fileURLWithPath: tempPath))
        try #require(link(tempPath, backup.appendingPathComponent("snapshot.partial").path) == 0)

        let url = server.url(for: "/f.bin").absoluteString
        let json: [String: Any] = [
            "version": 1, "url": url, "originalURL": url, "offset": length, "expectedLength": length,
            "acceptRanges": "bytes", "tempPath": tempPath, "suggestedFilename": "f.bin",
            "destination": output.appendingPathComponent("f.bin").path, "finalName": tempName, "headers": [:],
            "createdAt": "2026-11-30T03:40:00.000Z", "updatedAt": "2026-11-30T03:44:40.250Z",
        ]
        let tokenURL = scratch.file("f.bin.resumable.json")
        try JSONSerialization.data(withJSONObject: json).write(to: tokenURL)

        let inspect = try await CLIProcess.run(["inspect", tokenURL.path], in: scratch.url)
        #expect(!inspect.stdout.contains("already finished"), "inspect: \(inspect)")

        let resume = try await CLIProcess.run(
            ["resume", tokenURL.path, "-q", "--retries", "0", "--transport", "libcurl"], in: scratch.url)
        let kept =
            FileManager.default.fileExists(atPath: tempPath)
            || (try? Data(contentsOf: output.appendingPathComponent("f.bin"))) == Data(bytes)
        #expect(
            kept,
            "out/ holds neither the temporary file nor the finished one: \(scratch.contents(of: output)); \(resume)")
        #expect(!resume.stderr.contains("already finished"), "the temporary file was reported as finished: \(resume)")
        #expect(resume.exitCode == 65 && resume.stderr.contains("finalName"), "\(resume)")
    }
}
