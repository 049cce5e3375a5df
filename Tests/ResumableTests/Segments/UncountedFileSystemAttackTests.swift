import Foundation
import LoopbackServer
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review of a531c5f (the remembered count) and d4de53c / c7e1922 (the free-space check before
/// preallocating).
@Suite("Attack (10th round): the free-space check on file systems that do not count their blocks")
struct UncountedFileSystemAttackTests {
    static let mebibyte: Int64 = 1 << 20

    /// c7e1922's check compares the blocks needed with `f_bfree` (root) or `f_bavail`, and refuses with `ENOSPC` when
    /// they are fewer. A file system that does not count its blocks reports 0 for both: a tmpfs mounted with `size=0`
    /// (unlimited: tmpfs(5)), ramfs, many FUSE file systems. Every multi-connection download there now fails with
    /// "disk full" before a byte is written, on a disk with gigabytes free; before c7e1922 it finished (ramfs has no
    /// fallocate and falls back to a sparse file, tmpfs allocates). `df` prints these as size 0, not as full.
    @Test(
        "A file system that reports no block counts (tmpfs size=0, ramfs): a multi-connection download finishes",
        arguments: ["tmpfs", "ramfs"])
    func uncountedFileSystemIsNotFull(type: String) async throws {
        guard let disk = try await SmallFileSystem.mount(type, options: type == "tmpfs" ? "size=0" : nil) else {
            print("⚠️ cannot mount a \(type) (needs root): uncountedFileSystemIsNotFull did not run")
            return
        }
        var space = statvfs()
        #expect(statvfs(disk.directory.path, &space) == 0)
        #expect(space.f_blocks == 0 && space.f_bfree == 0, "the \(type) counts its blocks: \(space.f_blocks)")
        let fixture = try DownloadFixture()
        let seed: UInt64 = 7401
        let total: Int64 = 4 * Self.mebibyte
        fixture.serve(.generated(length: total, seed: seed))
        let task = try DownloadTask(
            url: fixture.server.url(for: "/file.bin"), destination: .directory(disk.directory.url),
            configuration: Segmented.configuration(.fixed(2), retries: 0))
        switch await task.result {
        case .success(let result):
            #expect(try fixture.file(result.fileURL, holds: total, seed: seed))
        case .failure(let error):
            Issue.record("a 4 MiB download into a \(type) that reports 0 blocks (unlimited) failed: \(error)")
        }
    }
}
