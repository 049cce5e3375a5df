import Foundation
import LoopbackServer
import ProcessSpawning
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Attacks on the flush of a temporary file's directory before its first token (`PartialFile.synchronize`, cc8393e).
///
/// A directory a user may create files in and rename them within, but not list (mode `-wx`, a "drop box" such as an
/// upload or spool directory), cannot be opened `O_RDONLY`: the directory flush fails with `EACCES` though nothing is
/// wrong with the disk. Before cc8393e that flush was best effort and such a download finished (the move into place
/// needs only write and search permission); cc8393e counted the failure as a failed flush of the file: the download
/// stopped after every byte was written and flushed, with a token at byte 0, and every resume failed again. A flush
/// that cannot be tried no longer counts. The CLI runs as `nobody` (`setpriv`): root ignores directory permissions.
@Suite("Attacks on the temporary file's name flush")
struct NameFlushAttackTests {
    /// Runs the CLI as uid/gid 65534 with `arguments`; standard error goes to the collected output.
    static func runAsNobody(_ arguments: [String], in directory: URL) async throws -> (code: Int32, output: String) {
        let executable = CLIProcess.executable.path
        let (termination, output) = try await onOwnThread {
            try SpawnedProcess.run(
                executable: URL(fileURLWithPath: "/usr/bin/setpriv"),
                arguments: [
                    "--reuid=65534", "--regid=65534", "--clear-groups", "--", "/bin/sh", "-c",
                    "exec \"$0\" \"$@\" 2>&1",
                    executable,
                ] + arguments,
                currentDirectory: directory)
        }
        return (termination.shellStatus, String(decoding: output, as: UTF8.self))
    }

    @Test(
        "get into a directory the user may write but not list (-wx): finishes, as before the name flush was checked")
    func writeOnlyDirectory() async throws {
        guard geteuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else {
            print("NameFlushAttackTests: skipped (needs root and setpriv to run the CLI as another user)")
            return
        }
        let scratch = try ScratchDirectory()
        let output = try scratch.subdirectory("dropbox")
        let tokens = try scratch.subdirectory("tokens")
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: scratch.url.path)
        try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: tokens.path)
        // Write and search, no read: files can be created and renamed in it, the directory cannot be opened.
        try FileManager.default.setAttributes([.posixPermissions: 0o333], ofItemAtPath: output.path)
        defer { try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: output.path) }

        let server = try LoopbackServer()
        defer { server.shutdown() }
        let bytes = Resource.generatedBytes(seed: 831, range: 0..<300_000)
        server.register(.bytes(bytes), at: "/a.bin")
        let token = tokens.appendingPathComponent("a.token.json")
        let run = try await Self.runAsNobody(
            [
                "get", server.url(for: "/a.bin").absoluteString, "-o", output.path + "/", "--token", token.path,
                "--retries", "0",
            ], in: tokens)
        #expect(run.code == 0, "\(run.output)")
        #expect(
            (try? Data(contentsOf: output.appendingPathComponent("a.bin"))) == Data(bytes),
            "the finished file is missing: \(run.output)")
        // Had it stopped, the token would at least have to cover the bytes whose flush succeeded: all of them.
        if run.code != 0, let data = try? Data(contentsOf: token),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        {
            #expect(
                (object["offset"] as? Int) == 300_000,
                "every byte was written and fdatasync'ed, yet the token left says \(object["offset"] ?? "-")")
        }
    }
}
