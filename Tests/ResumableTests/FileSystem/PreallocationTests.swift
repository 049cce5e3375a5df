import CResumable
import Foundation
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// `PartialFile.preallocate(length:)` (`cresumable_preallocate`): blocks reserved on a disk, none in memory.
@Suite("Preallocation")
struct PreallocationTests {
    /// The length of the file at `path` and the bytes allocated to it.
    /// Whether `directory` is on tmpfs, as the preallocation sees it.
    static func isInMemory(_ directory: String) -> Bool {
        let descriptor = open(directory, O_RDONLY | O_DIRECTORY)
        defer { if descriptor >= 0 { close(descriptor) } }
        return descriptor >= 0 && cresumable_is_in_memory(descriptor) == 1
    }

    static func sizeAndAllocation(of path: String) -> (size: Int64, allocated: Int64) {
        var status = stat()
        #expect(stat(path, &status) == 0)
        return (Int64(status.st_size), Int64(status.st_blocks) * 512)
    }

    @Test("On tmpfs the file gets its full length without a page: allocating there only zeroes memory")
    func tmpfsIsNotAllocated() throws {
        let directory = try TemporaryDirectory(in: "/dev/shm")
        guard Self.isInMemory(directory.path) else {
            print("⚠️ /dev/shm is not a tmpfs: tmpfsIsNotAllocated did not run")
            return
        }
        let file = try PartialFile.create(in: directory.path)
        defer { file.release() }
        try file.preallocate(length: 8 << 20)
        let (size, allocated) = Self.sizeAndAllocation(of: file.path)
        #expect(size == 8 << 20)
        #expect(allocated == 0, "tmpfs allocated \(allocated) bytes")
    }

    @Test("On a disk file system the blocks are reserved")
    func diskIsAllocated() throws {
        let directory = try TemporaryDirectory()
        #expect(!Self.isInMemory(directory.path), "the test's temporary directory is on tmpfs")
        let file = try PartialFile.create(in: directory.path)
        defer { file.release() }
        try file.preallocate(length: 8 << 20)
        let (size, allocated) = Self.sizeAndAllocation(of: file.path)
        #expect(size == 8 << 20)
        // A file system without fallocate (some FUSE ones) leaves the file sparse: then nothing more is checked.
        if allocated > 0 {
            #expect(allocated >= 8 << 20, "\(allocated) bytes allocated")
        }
    }
}
