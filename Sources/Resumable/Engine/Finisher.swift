import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Moves a finished temporary file into place under the destination's rules.
struct Finisher: Sendable {
    let destination: DownloadTask.Destination
    let existingFile: DownloadTask.ExistingFilePolicy
    /// The paths other downloads of the same queue took (``FinalPathClaims``); `nil` outside a queue.
    var claims: FinalPathClaims? = nil
    /// Who claims paths for this download: its queue's identifier for it.
    var owner = ""

    /// Moves `file` to its final path and returns that path.
    ///
    /// `announce` runs before a move to a free name other than the one the destination names, with that name (again
    /// for each name tried): it records the name, so that a crash right after the move finds the finished file
    /// (``ResumeToken/finalName``). A move under the destination's own name announces nothing: the token already
    /// points there.
    ///
    /// In a queue, every path is claimed before the move (``FinalPathClaims``), whatever the policy (a later run on the
    /// same store may overwrite): with ``DownloadTask/ExistingFilePolicy/overwrite`` a path another download of the
    /// queue took gets a free name instead, as with ``DownloadTask/ExistingFilePolicy/chooseFreeName``; with
    /// ``DownloadTask/ExistingFilePolicy/fail`` it fails.
    func moveIntoPlace(
        _ file: PartialFile, suggestedFilename: String,
        announce: (String) throws(ResumableError) -> Void = { _ in }
    ) throws(ResumableError) -> String {
        let directory = destination.directoryPath
        let wanted: String
        switch destination.kind {
        case .directory(let path): wanted = (path as NSString).appendingPathComponent(suggestedFilename)
        case .file(let path): wanted = path
        }
        let ours = claims?.claim(wanted, by: owner) ?? true
        switch existingFile {
        case .overwrite where ours:
            try move(file, to: wanted, replacing: true)
            return wanted
        case .fail:
            guard ours else {
                throw ResumableError(.destinationExists, "'\(wanted)' is another download's of the same queue")
            }
            do {
                try move(file, to: wanted, replacing: false)
            } catch  where Self.isTaken(wanted) {
                throw ResumableError(.destinationExists, "'\(wanted)' already exists")
            }
            return wanted
        case .chooseFreeName, .overwrite:
            // The name itself first: usually free, and the move (which never replaces) says when it is not.
            if ours {
                do {
                    try move(file, to: wanted, replacing: false)
                    return wanted
                } catch  where Self.isTaken(wanted) {
                    // Someone else's file is there: the name stays theirs, and this download takes a free one.
                }
            }
            let name = (wanted as NSString).lastPathComponent
            for _ in 0..<100 {
                let free = SuggestedFilename.available(name) { candidate in
                    let path = (directory as NSString).appendingPathComponent(candidate)
                    return Self.isTaken(path) || (claims?.isClaimed(path, byOtherThan: owner) ?? false)
                }
                let path = (directory as NSString).appendingPathComponent(free)
                // Not yet on disk, but another download of the queue is about to move its file there.
                guard claims?.claim(path, by: owner) ?? true else { continue }
                do {
                    try announce(free)
                } catch {
                    claims?.release(path, by: owner)
                    throw error
                }
                do {
                    try move(file, to: path, replacing: false)
                    return path
                } catch  where Self.isTaken(path) {
                    continue  // Taken between the check and the move: try the next free name.
                }
            }
            throw ResumableError(.destinationExists, "no free name for '\(wanted)'")
        }
    }

    /// Moves `file` to `path`, which this download claimed: the claim is marked moved when the file is there, and
    /// given back when the move failed (nothing of this queue is at `path` then).
    private func move(_ file: PartialFile, to path: String, replacing: Bool) throws(ResumableError) {
        do {
            try file.move(to: path, replacing: replacing)
        } catch {
            claims?.release(path, by: owner)
            throw error
        }
        claims?.moved(path, by: owner)
    }

    /// Whether anything has the name `path`, a symbolic link too, even one that points nowhere: the moves never
    /// replace one, so a dangling link must count as taken (`FileManager.fileExists` follows links and says no).
    static func isTaken(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0
    }
}
