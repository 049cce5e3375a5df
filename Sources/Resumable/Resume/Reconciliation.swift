import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What a token's temporary file proves, as `resume` and `inspect` both see it.
package struct PartialFileReport: Sendable {
    /// The verdict.
    package enum State: Sendable {
        /// Present, ours, and exactly as long as the bytes the token lists reach (its offset, or the end of its last
        /// range).
        case consistent
        /// Present and ours, but shorter: a resume keeps what the file still holds of the listed bytes and asks for
        /// the rest.
        case shorter
        /// Present and ours, but longer: a resume first cuts it where the listed bytes end.
        case longer
        /// Gone, and the download was not finished: a resume starts over, but only into a destination the
        /// caller chooses (nothing proves the token's destination is the caller's own); without one it fails
        /// with ``ResumableError/Code/destinationRequired``.
        case missing
        /// The download finished: its file was moved into place (to `path`, when known).
        case finished(path: String?)
        /// A resume refuses this token.
        case refused(ResumableError)
    }

    /// The verdict.
    package let state: State
    /// The temporary file's size, when it is present and ours.
    package let size: Int64?
    /// How many of its bytes a resume keeps (``ResumeToken/kept(inFileOf:)``), when it is present and ours.
    package let keptBytes: Int64?
    /// Where a resume cuts a longer file: where the bytes the token lists end.
    package let listedEnd: Int64

    init(state: State, size: Int64?, token: ResumeToken) {
        self.state = state
        self.size = size
        listedEnd = token.listedEnd
        keptBytes = size.map { size in
            let kept = token.kept(inFileOf: size)
            return kept.offset + kept.ranges.count
        }
    }
}

/// Reconciles a token with what is on disk, before a resume touches anything: one set of checks shared by
/// ``DownloadTask/resume(from:destination:replacingURL:configuration:)`` and the CLI's `inspect`.
///
/// A token is data from outside, possibly from another user: its `destination` and `tempPath` are honored
/// only when they prove to be this user's own download here — the temporary file exists, has this library's
/// naming, lies in the destination's directory (or the configured temporary directory), is a regular file
/// with one link that belongs to this user. Otherwise the caller must choose the destination.
package enum Reconciliation {
    /// A token opened for resuming.
    struct Opened {
        /// The temporary file, locked.
        let file: PartialFile
        /// Its size.
        let bytesOnDisk: Int64
        /// Where the finished file goes.
        let destination: DownloadTask.Destination
        /// Whether only the token named ``destination`` (the caller did not).
        let destinationFromToken: Bool
        /// Whether the token's temporary file was missing and a new one was started.
        let startedOver: Bool
    }

    /// The result of examining the token's temporary file through `open`.
    private enum Examination<Handle> {
        case present(Handle, size: Int64)
        case missing
        case finished(path: String?, strayLink: Bool)
    }

    /// Reports what a resume would find, without changing anything.
    package static func inspect(
        _ token: ResumeToken, destination: DownloadTask.Destination? = nil, temporaryDirectory: URL? = nil
    ) -> PartialFileReport {
        do throws(ResumableError) {
            let examination = try examine(token, destination: destination, temporaryDirectory: temporaryDirectory) {
                (path) throws(ResumableError) -> (Void, Int64) in
                // Opened as a resume opens it (for writing, which changes nothing), so permissions agree too.
                #if canImport(Glibc)
                    let descriptor = Glibc.open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
                #else
                    let descriptor = Darwin.open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
                #endif
                guard descriptor >= 0 else { throw PartialFile.openError(path, errno: errno) }
                defer { close(descriptor) }
                var status = stat()
                guard fstat(descriptor, &status) == 0 else {
                    throw .fileSystem("inspecting", path: path, errno: errno)
                }
                try PartialFile.checkOwnership(status, path: path)
                // The same lock a resume takes, released at once: a file in use is reported as such.
                guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
                    throw ResumableError(
                        .tokenInUse, "the temporary file '\(path)' is in use by another download (task or process)")
                }
                return ((), Int64(status.st_size))
            }
            switch examination {
            case .present(_, let size):
                let end = token.listedEnd
                let state: PartialFileReport.State = size == end ? .consistent : size < end ? .shorter : .longer
                return PartialFileReport(state: state, size: size, token: token)
            case .missing:
                return PartialFileReport(state: .missing, size: nil, token: token)
            case .finished(let path, _):
                return PartialFileReport(state: .finished(path: path), size: nil, token: token)
            }
        } catch {
            return PartialFileReport(state: .refused(error), size: nil, token: token)
        }
    }

    /// Opens the token's temporary file for a resume, or starts a new one when it is gone and the caller
    /// chose a destination.
    ///
    /// - Throws: ``ResumableError/Code/invalidToken`` for a file this library must not touch;
    ///   ``ResumableError/Code/destinationRequired`` when the file is gone and no destination was given;
    ///   ``ResumableError/Code/tokenGone`` when the download already finished;
    ///   ``ResumableError/Code/tokenInUse`` when another task holds the file.
    static func open(
        _ token: ResumeToken, destination: DownloadTask.Destination?, temporaryDirectory: URL?
    ) throws(ResumableError) -> Opened {
        let examination = try examine(token, destination: destination, temporaryDirectory: temporaryDirectory) {
            (path) throws(ResumableError) -> (PartialFile, Int64) in
            let file = try PartialFile.openExisting(at: path)
            return (file, try file.size())
        }
        switch examination {
        case .present(let file, let size):
            return Opened(
                file: file,
                bytesOnDisk: size,
                destination: destination ?? tokenDestination(token),
                destinationFromToken: destination == nil,
                startedOver: false
            )
        case .missing:
            guard let destination else { throw destinationRequired(token) }
            let directory = temporaryDirectory?.standardizedFileURL.path ?? destination.directoryPath
            let file = try PartialFile.create(in: directory)
            return Opened(
                file: file, bytesOnDisk: 0, destination: destination, destinationFromToken: false, startedOver: true)
        case .finished(let path, let strayLink):
            if strayLink, unlink(token.tempPath) == 0 { DurableSteps.record(.unlink, token.tempPath) }
            throw ResumableError(
                .tokenGone,
                "the download already finished" + (path.map { ": its file is '\($0)'" } ?? "")
                    + "; nothing to resume"
            )
        }
    }

    /// Where the temporary file at `tempPath` must be copied before a resume into `destination`, or `nil` when it may
    /// stay: only a caller's destination moves it, and only when the file lies neither in that destination's
    /// directory nor in the configured temporary directory.
    ///
    /// A token pairs one destination with one temporary file, and its reader accepts the file only beside the
    /// destination or in the temporary directory (``checkPlacement(_:destination:temporaryDirectory:)``). Left where
    /// it was, the file would be named by tokens that say the new destination, which no later resume accepts.
    static func relocationDirectory(
        of tempPath: String, destination: DownloadTask.Destination?, temporaryDirectory: URL?
    ) -> String? {
        guard let destination else { return nil }
        let allowed = [destination.directoryPath] + (temporaryDirectory.map { [$0.standardizedFileURL.path] } ?? [])
        // The reader's own rule, spelling and all: a directory reached through a symbolic link is another spelling,
        // which the reader refuses, so the file is copied there too.
        if isPlaced(tempPath, in: allowed) { return nil }
        return allowed.last
    }

    /// Whether `tempPath` lies directly in one of the `allowed` directories, compared byte for byte after
    /// standardizing (``checkPlacement(_:destination:temporaryDirectory:)``).
    private static func isPlaced(_ tempPath: String, in allowed: [String]) -> Bool {
        let actual = URL(fileURLWithPath: (tempPath as NSString).deletingLastPathComponent).standardizedFileURL.path
        // Byte for byte: paths are bytes, and `String ==` holds canonically equivalent names (`é` as one code point or
        // as `e` and a combining accent) equal, which are two directories.
        return allowed.contains { URL(fileURLWithPath: $0).standardizedFileURL.path.utf8.elementsEqual(actual.utf8) }
    }

    /// The destination a token names; `nil` in the token means the temporary file's directory.
    static func tokenDestination(_ token: ResumeToken) -> DownloadTask.Destination {
        DownloadTask.Destination(tokenValue: token.destination, tempPath: token.tempPath)
    }

    private static func destinationRequired(_ token: ResumeToken) -> ResumableError {
        ResumableError(
            .destinationRequired,
            "the token's temporary file '\(token.tempPath)' is gone, so nothing proves that its destination "
                + "'\(tokenDestination(token).tokenValue)' is yours; choose where the file goes "
                + "(resumable resume TOKEN -o PATH; in the library, pass a destination)"
        )
    }

    /// The checks, in order: placement, then the file itself through `open` (which applies
    /// ``PartialFile/checkOwnership(_:path:)``), then how a missing or doubly linked file came to be.
    private static func examine<Handle>(
        _ token: ResumeToken,
        destination: DownloadTask.Destination?,
        temporaryDirectory: URL?,
        open: (String) throws(ResumableError) -> (Handle, Int64)
    ) throws(ResumableError) -> Examination<Handle> {
        try checkPlacement(token, destination: destination, temporaryDirectory: temporaryDirectory)
        // Whether the finished file is looked for where the token says it went: not when the caller chose another
        // directory. A path only the token names never makes a file finished, nor the temporary file unlinked.
        let looksForFinishedFile = destination.map { Self.sameDirectory($0, tokenDestination(token)) } ?? true
        if looksForFinishedFile, let finishedAt = interruptedFinish(token) ?? copiedIntoPlace(token) {
            return .finished(path: finishedAt, strayLink: true)
        }
        do throws(ResumableError) {
            let (handle, size) = try open(token.tempPath)
            return .present(handle, size: size)
        } catch  where error.code == .tokenGone {
            // Finishing writes a last token whose offset is the whole length before the move; a token like
            // that without its file, and a file of that length where it was going, means the move happened.
            if looksForFinishedFile, let finished = movedIntoPlace(token) {
                return .finished(path: finished, strayLink: false)
            }
            return .missing
        }
    }

    /// Whether two destinations lie in the same directory: the same device and inode (one directory may have
    /// several names through symbolic links), or, when either cannot be examined, the same path byte for byte after
    /// standardizing.
    private static func sameDirectory(_ one: DownloadTask.Destination, _ other: DownloadTask.Destination) -> Bool {
        sameDirectory(path: one.directoryPath, other.directoryPath)
    }

    /// ``sameDirectory(_:_:)`` for two directory paths.
    private static func sameDirectory(path one: String, _ other: String) -> Bool {
        var (first, second) = (stat(), stat())
        if stat(one, &first) == 0, stat(other, &second) == 0 {
            return first.st_dev == second.st_dev && first.st_ino == second.st_ino
        }
        let (firstPath, secondPath) = (
            URL(fileURLWithPath: one).standardizedFileURL.path, URL(fileURLWithPath: other).standardizedFileURL.path
        )
        return firstPath.utf8.elementsEqual(secondPath.utf8)
    }

    /// Throws unless the temporary file lies directly in the token's destination directory, the caller's
    /// destination directory, or the configured temporary directory.
    private static func checkPlacement(
        _ token: ResumeToken, destination: DownloadTask.Destination?, temporaryDirectory: URL?
    ) throws(ResumableError) {
        var allowed = [tokenDestination(token).directoryPath]
        if let destination { allowed.append(destination.directoryPath) }
        if let temporaryDirectory { allowed.append(temporaryDirectory.standardizedFileURL.path) }
        guard isPlaced(token.tempPath, in: allowed) else {
            throw ResumableError.invalidToken(
                field: "tempPath",
                "is not in the destination's directory (\(tokenDestination(token).directoryPath)): \(token.tempPath)"
            )
        }
    }

    /// Where the token's finished file would be, when a regular file of the token's complete length is there.
    ///
    /// The move is a rename, which sets the file's status-change time (`st_ctime`), and it comes after the token was
    /// made: a file whose status last changed before that (allowing a second for coarse file-system clocks) was there
    /// before the move and is someone else's, such as an older file of the same length when the temporary file was
    /// removed by something else.
    private static func movedIntoPlace(_ token: ResumeToken) -> String? {
        guard let length = token.expectedLength, token.offset == length else { return nil }
        let candidate = finalPath(token)
        var status = stat()
        guard lstat(candidate, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG, Int64(status.st_size) == length
        else { return nil }
        let changed = Double(status.st_ctim.tv_sec) + Double(status.st_ctim.tv_nsec) / 1e9
        guard changed >= token.updatedAt.timeIntervalSince1970 - 1 else { return nil }
        return candidate
    }

    /// The path the finished file gets under the token's own destination, or under the free name a last token
    /// announced (``ResumeToken/finalName``, always in the destination's directory).
    private static func finalPath(_ token: ResumeToken) -> String {
        let destination = tokenDestination(token)
        if let finalName = token.finalName {
            let path = (destination.directoryPath as NSString).appendingPathComponent(finalName)
            // Never the temporary file itself (the reader refuses such a name; this holds for any spelling).
            if !URL(fileURLWithPath: path).standardizedFileURL.path.utf8.elementsEqual(
                URL(fileURLWithPath: token.tempPath).standardizedFileURL.path.utf8)
            {
                return path
            }
        }
        switch destination.kind {
        case .directory(let path): return (path as NSString).appendingPathComponent(token.suggestedFilename)
        case .file(let path): return path
        }
    }

    /// The finished file's path when a finish across file systems was interrupted after the copy was renamed into
    /// place and before the temporary file was removed (`PartialFile.move`, on `EXDEV`): the temporary file is whole,
    /// and the file where it was going is on another file system, of the same length, with the same bytes (compared,
    /// byte for byte: only in this case, so only after such a crash). `nil` otherwise, and when a download holds
    /// the temporary file.
    private static func copiedIntoPlace(_ token: ResumeToken) -> String? {
        guard let length = token.expectedLength, token.offset == length else { return nil }
        let candidate = finalPath(token)
        var temporary = stat()
        var finished = stat()
        guard lstat(token.tempPath, &temporary) == 0, (temporary.st_mode & S_IFMT) == S_IFREG,
            temporary.st_uid == geteuid(), Int64(temporary.st_size) == length,
            lstat(candidate, &finished) == 0, (finished.st_mode & S_IFMT) == S_IFREG, Int64(finished.st_size) == length,
            finished.st_dev != temporary.st_dev
        else { return nil }
        let source = openForReading(token.tempPath)
        guard source >= 0 else { return nil }
        defer { close(source) }
        // A download that holds the file is finishing it right now: not a crash's leftover.
        guard flock(source, LOCK_SH | LOCK_NB) == 0 else { return nil }
        let copy = openForReading(candidate)
        guard copy >= 0 else { return nil }
        defer { close(copy) }
        return sameBytes(source, copy, length: length) ? candidate : nil
    }

    /// `open(2)` for reading, never following a symbolic link (the static `open` of this type is another function).
    private static func openForReading(_ path: String) -> Int32 {
        #if canImport(Glibc)
            Glibc.open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        #else
            Darwin.open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        #endif
    }

    /// Whether the first `length` bytes of the two files are the same (and both have that many).
    private static func sameBytes(_ first: Int32, _ second: Int32, length: Int64) -> Bool {
        let chunk = 1 << 20
        let a = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 64)
        let b = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 64)
        defer {
            a.deallocate()
            b.deallocate()
        }
        var offset: Int64 = 0
        while offset < length {
            let count = Int(min(Int64(chunk), length - offset))
            guard readFully(first, into: a, count: count, at: offset),
                readFully(second, into: b, count: count, at: offset),
                memcmp(a.baseAddress!, b.baseAddress!, count) == 0
            else { return false }
            offset += Int64(count)
        }
        return true
    }

    private static func readFully(
        _ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer, count: Int, at offset: Int64
    ) -> Bool {
        var done = 0
        while done < count {
            let read = pread(descriptor, buffer.baseAddress! + done, count - done, off_t(offset) + off_t(done))
            if read < 0, errno == EINTR { continue }
            guard read > 0 else { return false }
            done += read
        }
        return true
    }

    /// The finished file's path when a finish was interrupted between `link` and `unlink` (only where
    /// `renameat2` is missing): the temporary file then has a second name, the destination, and the same
    /// inode. `nil` otherwise.
    private static func interruptedFinish(_ token: ResumeToken) -> String? {
        var temporary = stat()
        guard lstat(token.tempPath, &temporary) == 0, (temporary.st_mode & S_IFMT) == S_IFREG,
            temporary.st_nlink == 2, temporary.st_uid == geteuid(),
            let length = token.expectedLength, token.offset == length, Int64(temporary.st_size) == length
        else { return nil }
        let candidate = finalPath(token)
        var finished = stat()
        guard lstat(candidate, &finished) == 0, finished.st_dev == temporary.st_dev,
            finished.st_ino == temporary.st_ino
        else { return nil }
        return candidate
    }
}
