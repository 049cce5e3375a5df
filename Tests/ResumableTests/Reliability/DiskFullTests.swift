import Foundation
import LoopbackServer
import ProcessSpawning
import Testing

@testable import Resumable

/// A file system the test mounts (root only): a small tmpfs, so the disk really fills up with `ENOSPC`, or another
/// kind (`mount(_:options:)`).
final class SmallFileSystem {
    let directory: TemporaryDirectory
    private(set) var mounted = false

    private init(directory: TemporaryDirectory) {
        self.directory = directory
    }

    /// A mounted tmpfs of `kilobytes`, or `nil` when it cannot be mounted (not root, or not allowed).
    static func mount(kilobytes: Int) async throws -> SmallFileSystem? {
        try await mount("tmpfs", options: "size=\(kilobytes)k")
    }

    /// A mounted file system of `type` with `options`, or `nil` when it cannot be mounted (not root, or not allowed).
    static func mount(_ type: String, options: String? = nil) async throws -> SmallFileSystem? {
        let system = SmallFileSystem(directory: try TemporaryDirectory())
        guard geteuid() == 0 else { return nil }
        let path = system.directory.path
        let arguments = ["-t", type] + (options.map { ["-o", $0] } ?? []) + [type, path]
        guard try await onOwnThread({ run("/bin/mount", arguments) }) else { return nil }
        system.mounted = true
        return system
    }

    /// Grows the file system to `kilobytes`, as if space had been freed.
    func grow(toKilobytes kilobytes: Int) async throws -> Bool {
        let path = directory.path
        return try await onOwnThread { Self.run("/bin/mount", ["-o", "remount,size=\(kilobytes)k", path]) }
    }

    deinit {
        if mounted { _ = Self.run("/bin/umount", ["-l", directory.path]) }
    }

    private static func run(_ tool: String, _ arguments: [String]) -> Bool {
        let result = try? SpawnedProcess.run(
            executable: URL(fileURLWithPath: tool), arguments: arguments, standardError: .nullDevice)
        return result?.termination == .exited(0)
    }
}

@Suite("A full disk")
struct DiskFullTests {
    @Test(
        "A full disk fails with an error that says so; the token covers only bytes really written; resuming after space is freed completes the file"
    )
    func diskFull() async throws {
        guard let disk = try await SmallFileSystem.mount(kilobytes: 256) else {
            // Mounting needs root (CI runs as root). Without it, the CLI's RLIMIT_FSIZE test still covers the
            // same path (EFBIG instead of ENOSPC), so say so loudly instead of failing.
            print(
                "⚠️ cannot mount a small tmpfs (needs root): the library's ENOSPC test did not run; "
                    + "the CLI's file-size-limit test covers the full-disk path"
            )
            return
        }
        let server = try LoopbackServer()
        let content = testBytes(count: 1_000_000)
        server.register(.bytes(content), at: "/big.bin")
        let task = try DownloadTask(
            url: server.url(for: "/big.bin"),
            destination: .directory(disk.directory.url),
            configuration: DownloadFixture.configuration(retries: 0)
        )
        let error = try #require(await failure(of: task))
        #expect(error.code == .diskFull, "\(error)")
        #expect(error.message.contains("No space left"), "\(error.message)")
        let token = try #require(error.resumeToken)
        #expect(token.offset > 0 && token.offset <= 256 * 1024)
        let onDisk = try Data(contentsOf: URL(fileURLWithPath: token.tempPath))
        #expect(onDisk.count >= Int(token.offset))
        expectSameBytes(Array(onDisk.prefix(Int(token.offset))), Array(content[0..<Int(token.offset)]))

        #expect(try await disk.grow(toKilobytes: 4096))
        let resumed = try DownloadTask.resume(from: token, configuration: DownloadFixture.configuration())
        let result = try await resumed.value
        try expectSameBytes(Data(contentsOf: result.fileURL), Data(content))
        #expect(server.requests(for: "/big.bin").last?.header("Range") == "bytes=\(token.offset)-")
    }
}
