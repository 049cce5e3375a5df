import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The paths finished files of one queue were moved to, so that ``DownloadTask/ExistingFilePolicy/overwrite`` never
/// replaces a file the same queue produced: two downloads of a list that end under one name (two servers'
/// `index.html`, or an `out=` name equal to another entry's suggested name) would otherwise keep only the second,
/// and the batch would report both finished.
///
/// A path is claimed before the move, under a lock, so two downloads finishing at once cannot both take it; the
/// download that claimed it may claim it again (a finish that failed and is tried later). A claim whose file was
/// moved there and is gone since (the user moved it away) holds nothing any more, and another download may take the
/// name. With a ``TaskStore`` the claims are kept in the store too (``TaskStore/recordClaim(_:by:)``), so a batch
/// continued after an interruption or a crash knows the files its earlier run saved.
///
/// Paths are compared as bytes, as the file system does, with their directory resolved (symbolic links followed):
/// `out/x.bin` and `link-to-out/x.bin` are one file.
final class FinalPathClaims: Sendable {
    private struct Claim {
        var owner: String
        /// The file was moved there (or, for a claim read back from a store, may have been).
        var moved: Bool
    }

    private let claimed = Mutex<[[UInt8]: Claim]>([:])
    /// The last directory resolved: as given, what it resolved to, and its device and inode then.
    private let lastDirectory = Mutex<(given: String, resolved: String, device: UInt64, inode: UInt64)?>(nil)
    private let onClaim: (@Sendable (_ path: String, _ owner: String) -> Void)?
    private let onRelease: (@Sendable (_ path: String) -> Void)?

    /// `onClaim` runs for each new claim before the claim returns, `onRelease` for each release (a store writes them
    /// down: ``TaskStore/recordClaim(_:by:)``, ``TaskStore/releaseClaim(_:)``); both get the resolved path.
    init(
        onClaim: (@Sendable (_ path: String, _ owner: String) -> Void)? = nil,
        onRelease: (@Sendable (_ path: String) -> Void)? = nil
    ) {
        self.onClaim = onClaim
        self.onRelease = onRelease
    }

    /// Adds claims read back from a store (resolved paths), keeping any made since.
    func restore(_ claims: [(path: String, owner: String)]) {
        claimed.withLock { claimed in
            for claim in claims where claimed[Array(claim.path.utf8)] == nil {
                claimed[Array(claim.path.utf8)] = Claim(owner: claim.owner, moved: true)
            }
        }
    }

    /// Claims `path` for `owner`'s finished file; false when another download of the queue has it (and, if its file
    /// was moved there, the file is still there).
    func claim(_ path: String, by owner: String) -> Bool {
        let resolved = resolve(path)
        let key = Array(resolved.utf8)
        let new = claimed.withLock { claimed -> Bool? in
            if let holder = claimed[key] {
                if holder.owner == owner { return false }
                guard holder.moved, !Self.exists(resolved) else { return nil }
            }
            claimed[key] = Claim(owner: owner, moved: false)
            return true
        }
        guard let new else { return false }
        if new { onClaim?(resolved, owner) }
        return true
    }

    /// Says that `owner`'s file is now at `path`.
    func moved(_ path: String, by owner: String) {
        let key = Array(resolve(path).utf8)
        claimed.withLock { claimed in
            if claimed[key]?.owner == owner { claimed[key]?.moved = true }
        }
    }

    /// Gives `path` up after `owner`'s move to it failed: nothing of this queue is there, and another download may
    /// take it, also after a restart (the store records the release).
    func release(_ path: String, by owner: String) {
        let resolved = resolve(path)
        let released = claimed.withLock { claimed in
            let key = Array(resolved.utf8)
            guard claimed[key]?.owner == owner else { return false }
            claimed[key] = nil
            return true
        }
        if released { onRelease?(resolved) }
    }

    /// Whether a download of this queue other than `owner` holds `path` (as ``claim(_:by:)`` would refuse it).
    func isClaimed(_ path: String, byOtherThan owner: String) -> Bool {
        let resolved = resolve(path)
        guard let holder = claimed.withLock({ $0[Array(resolved.utf8)] }), holder.owner != owner else { return false }
        return !holder.moved || Self.exists(resolved)
    }

    /// `path` with its directory resolved (`realpath`), when the directory exists; `path` as given otherwise.
    ///
    /// The last resolution is used again only while the directory as given and the directory it resolved to are still
    /// one directory (device and inode, two `stat`s): a link in the path pointed elsewhere (`ln -sfn`) or a directory
    /// renamed since is resolved afresh, so a claim is never filed under where a path led before.
    private func resolve(_ path: String) -> String {
        let directory = (path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        let given = directory.isEmpty ? "." : directory
        var status = stat()
        guard stat(given, &status) == 0 else { return path }
        let (device, inode) = (UInt64(status.st_dev), UInt64(status.st_ino))
        if let last = lastDirectory.withLock({ $0 }), last.given.utf8.elementsEqual(given.utf8),
            last.device == device, last.inode == inode, stat(last.resolved, &status) == 0,
            UInt64(status.st_dev) == device, UInt64(status.st_ino) == inode
        {
            return (last.resolved as NSString).appendingPathComponent(name)
        }
        guard let pointer = realpath(given, nil) else { return path }
        defer { free(pointer) }
        let resolved = String(cString: pointer)
        lastDirectory.withLock { $0 = (given, resolved, device, inode) }
        return (resolved as NSString).appendingPathComponent(name)
    }

    /// Whether anything has the name `path` (`lstat`: a dangling link counts).
    private static func exists(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0
    }
}
