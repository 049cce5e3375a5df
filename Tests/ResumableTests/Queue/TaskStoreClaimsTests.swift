import Foundation
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// The store's `claims` file (docs/task-store.md): the names a queue's finished files took, kept across restarts.
@Suite("Task store claims file")
struct TaskStoreClaimsTests {
    @Test("Claims are appended and read back in order, also after a torn entry")
    func roundTrip() throws {
        let directory = try TemporaryDirectory()
        let store = try TaskStore(directory: directory.url)
        let (one, two) = (UUID().uuidString.lowercased(), UUID().uuidString.lowercased())
        store.recordClaim("/out/a.bin", by: one)
        store.recordClaim("/out/a (1).bin", by: two)
        let file = directory.url.appendingPathComponent("claims")
        let handle = try FileHandle(forWritingTo: file)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("\0\(UUID().uuidString.lowercased())\0/out/to".utf8))
        try handle.close()
        // A claim appended after the torn entry is read too.
        let three = UUID().uuidString.lowercased()
        store.recordClaim("/out/a (2).bin", by: three)
        let claims = store.claims()
        #expect(claims.map(\.path) == ["/out/a.bin", "/out/a (1).bin", "/out/to", "/out/a (2).bin"])
        #expect(claims.map(\.owner).first == one && claims.map(\.owner).last == three)
    }

    @Test("A claims file that is a FIFO, a symbolic link or a directory is neither waited on nor followed")
    func hostileClaimsFile() throws {
        for kind in ["fifo", "symlink", "directory"] {
            let directory = try TemporaryDirectory()
            let store = try TaskStore(directory: directory.url)
            let file = directory.url.appendingPathComponent("claims")
            let outside = directory.url.appendingPathComponent("outside")
            try Data().write(to: outside)
            switch kind {
            case "fifo": #expect(mkfifo(file.path, 0o600) == 0)
            case "symlink": #expect(symlink(outside.path, file.path) == 0)
            default: try FileManager.default.createDirectory(at: file, withIntermediateDirectories: false)
            }
            // Before the fix, a FIFO blocked the claim (and so the finish) until a reader came.
            store.recordClaim("/out/a.bin", by: UUID().uuidString.lowercased())
            #expect(store.claims().isEmpty, "\(kind)")
            #expect(try Data(contentsOf: outside).isEmpty, "\(kind): written through")
        }
    }
}
