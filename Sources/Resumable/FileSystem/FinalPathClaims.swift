import Foundation
import Synchronization

/// The paths finished files of one queue were moved to, so that ``DownloadTask/ExistingFilePolicy/overwrite`` never
/// replaces a file the same queue produced: two downloads of a list that end under one name (two servers'
/// `index.html`, or an `out=` name equal to another entry's suggested name) would otherwise keep only the second,
/// and the batch would report both finished.
///
/// A path is claimed before the move, under a lock, so two downloads finishing at once cannot both take it. Claims
/// last as long as the queue; paths are compared as bytes, as the file system does.
final class FinalPathClaims: Sendable {
    private let claimed = Mutex<Set<[UInt8]>>([])

    /// Claims `path` for a finished file; false when a file of this queue already has it.
    func claim(_ path: String) -> Bool {
        claimed.withLock { $0.insert(Array(path.utf8)).inserted }
    }

    /// Gives `path` up after a move to it failed: nothing of this queue is there, and the download that claimed it may
    /// claim it again when it finishes later.
    func release(_ path: String) {
        _ = claimed.withLock { $0.remove(Array(path.utf8)) }
    }

    /// Whether a download of this queue claimed `path`.
    func isClaimed(_ path: String) -> Bool {
        claimed.withLock { $0.contains(Array(path.utf8)) }
    }
}
