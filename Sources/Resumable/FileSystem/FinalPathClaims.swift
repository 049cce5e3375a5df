import Foundation
import Synchronization

/// The paths finished files of one queue were moved to, so that ``DownloadTask/ExistingFilePolicy/overwrite`` never
/// replaces a file the same queue produced: two downloads of a list that end under one name (two servers'
/// `index.html`, or an `out=` name equal to another entry's suggested name) would otherwise keep only the second,
/// and the batch would report both finished.
///
/// A path is claimed before the move, under a lock, so two downloads finishing at once cannot both take it; the
/// download that claimed it may claim it again (a finish that failed and is tried later). With a ``TaskStore`` the
/// claims are kept in the store too (``TaskStore/recordClaim(_:by:)``), so a batch continued after an interruption
/// or a crash knows the files its earlier run saved. Paths are compared as bytes, as the file system does.
final class FinalPathClaims: Sendable {
    private let claimed = Mutex<[[UInt8]: String]>([:])
    private let onClaim: (@Sendable (_ path: String, _ owner: String) -> Void)?
    private let onRelease: (@Sendable (_ path: String) -> Void)?

    /// `onClaim` runs for each new claim before the claim returns, `onRelease` for each release (a store writes them
    /// down: ``TaskStore/recordClaim(_:by:)``, ``TaskStore/releaseClaim(_:)``).
    init(
        onClaim: (@Sendable (_ path: String, _ owner: String) -> Void)? = nil,
        onRelease: (@Sendable (_ path: String) -> Void)? = nil
    ) {
        self.onClaim = onClaim
        self.onRelease = onRelease
    }

    /// Adds claims read back from a store, keeping any made since.
    func restore(_ claims: [(path: String, owner: String)]) {
        claimed.withLock { claimed in
            for claim in claims where claimed[Array(claim.path.utf8)] == nil {
                claimed[Array(claim.path.utf8)] = claim.owner
            }
        }
    }

    /// Claims `path` for `owner`'s finished file; false when another download of the queue has it.
    func claim(_ path: String, by owner: String) -> Bool {
        let key = Array(path.utf8)
        let new = claimed.withLock { claimed -> Bool? in
            if let holder = claimed[key] { return holder == owner ? false : nil }
            claimed[key] = owner
            return true
        }
        guard let new else { return false }
        if new { onClaim?(path, owner) }
        return true
    }

    /// Gives `path` up after `owner`'s move to it failed: nothing of this queue is there, and another download may
    /// take it, also after a restart (the store records the release).
    func release(_ path: String, by owner: String) {
        let released = claimed.withLock { claimed in
            let key = Array(path.utf8)
            guard claimed[key] == owner else { return false }
            claimed[key] = nil
            return true
        }
        if released { onRelease?(path) }
    }

    /// Whether a download of this queue other than `owner` claimed `path`.
    func isClaimed(_ path: String, byOtherThan owner: String) -> Bool {
        claimed.withLock { claimed in
            claimed[Array(path.utf8)].map { $0 != owner } ?? false
        }
    }
}
