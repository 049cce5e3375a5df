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
/// A claim is keyed by its directory's identity (device and inode, one `stat` that follows links) and the file's name
/// as bytes: `out/x.bin` and `link-to-out/x.bin` are one file, and so are a directory and the link left where it was
/// before a rename; a link pointed elsewhere leads to another key. The store keeps the path with its directory
/// resolved (`realpath`), and a claim read back is keyed by what that directory is then.
final class FinalPathClaims: Sendable {
    private struct Claim {
        var owner: String
        /// The file was moved there (or, for a claim read back from a store, may have been).
        var moved: Bool
    }

    private let claimed = Mutex<[[UInt8]: Claim]>([:])
    private let onClaim: (@Sendable (_ path: String, _ owner: String) -> Void)?
    private let onRelease: (@Sendable (_ path: String) -> Void)?

    /// `onClaim` runs for each new claim before the claim returns, `onRelease` for each release (a store writes them
    /// down: ``TaskStore/recordClaim(_:by:)``, ``TaskStore/releaseClaim(_:)``); both get the path with its directory
    /// resolved.
    init(
        onClaim: (@Sendable (_ path: String, _ owner: String) -> Void)? = nil,
        onRelease: (@Sendable (_ path: String) -> Void)? = nil
    ) {
        self.onClaim = onClaim
        self.onRelease = onRelease
    }

    /// Adds claims read back from a store, keeping any made since. A claim whose directory is gone protects nothing.
    func restore(_ claims: [(path: String, owner: String)]) {
        let keyed = claims.compactMap { claim in Self.key(claim.path).map { ($0, claim.owner) } }
        claimed.withLock { claimed in
            for (key, owner) in keyed where claimed[key] == nil {
                claimed[key] = Claim(owner: owner, moved: true)
            }
        }
    }

    /// Claims `path` for `owner`'s finished file; false when another download of the queue has it (and, if its file
    /// was moved there, the file is still there).
    func claim(_ path: String, by owner: String) -> Bool {
        let key = Self.lookupKey(path)
        let new = claimed.withLock { claimed -> Bool? in
            if let holder = claimed[key] {
                if holder.owner == owner { return false }
                guard holder.moved, !Finisher.isTaken(path) else { return nil }
            }
            claimed[key] = Claim(owner: owner, moved: false)
            return true
        }
        guard let new else { return false }
        if new, let onClaim { onClaim(Self.resolved(path), owner) }
        return true
    }

    /// Says that `owner`'s file is now at `path`.
    func moved(_ path: String, by owner: String) {
        let key = Self.lookupKey(path)
        claimed.withLock { claimed in
            if claimed[key]?.owner == owner { claimed[key]?.moved = true }
        }
    }

    /// Gives `path` up after `owner`'s move to it failed: nothing of this queue is there, and another download may
    /// take it, also after a restart (the store records the release).
    func release(_ path: String, by owner: String) {
        let key = Self.lookupKey(path)
        let released = claimed.withLock { claimed in
            guard claimed[key]?.owner == owner else { return false }
            claimed[key] = nil
            return true
        }
        if released, let onRelease { onRelease(Self.resolved(path)) }
    }

    /// Whether a download of this queue other than `owner` holds `path` (as ``claim(_:by:)`` would refuse it).
    func isClaimed(_ path: String, byOtherThan owner: String) -> Bool {
        let key = Self.lookupKey(path)
        guard let holder = claimed.withLock({ $0[key] }), holder.owner != owner else { return false }
        return !holder.moved || Finisher.isTaken(path)
    }

    /// The key of `path`: its directory's device and inode, then its name; `nil` when the directory is not there.
    private static func key(_ path: String) -> [UInt8]? {
        let directory = (path as NSString).deletingLastPathComponent
        var status = stat()
        guard stat(directory.isEmpty ? "." : directory, &status) == 0 else { return nil }
        var key = Array("\(status.st_dev):\(status.st_ino)/".utf8)
        key += Array((path as NSString).lastPathComponent.utf8)
        return key
    }

    /// ``key(_:)``, or the path's bytes when its directory is not there (nothing can be moved there then either).
    private static func lookupKey(_ path: String) -> [UInt8] {
        key(path) ?? Array(path.utf8)
    }

    /// `path` with its directory resolved, for the store; `path` as given when that fails.
    private static func resolved(_ path: String) -> String {
        guard let directory = ResolvedPath.of((path as NSString).deletingLastPathComponent) else { return path }
        return (directory as NSString).appendingPathComponent((path as NSString).lastPathComponent)
    }
}
