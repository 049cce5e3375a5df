import CResumable
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension ResumeToken {
    /// Reads and validates a token from a JSON file.
    ///
    /// The file is opened (a symbolic link given as the token file is followed), then checked on the open
    /// descriptor: it must be a regular file of at most 1 MiB, and at most that much plus one byte is ever
    /// read, so a FIFO, a device or a file that grows meanwhile is refused without being read whole.
    ///
    /// - Throws: ``ResumableError`` with code ``ResumableError/Code/tokenGone`` when the file does not exist
    ///   (the download finished, or the token was discarded), or ``ResumableError/Code/invalidToken``.
    public init(contentsOf file: URL) throws(ResumableError) {
        let (data, device, inode) = try Self.readTokenFile(at: file.path)
        try self.init(jsonData: data)
        // A token file is never its own temporary file (by any name): checkpoints written over it would leave the
        // download's bytes in an unlinked file and the token's JSON where the finished file is moved from.
        var temporary = stat()
        if lstat(tempPath, &temporary) == 0, temporary.st_dev == device, temporary.st_ino == inode {
            throw ResumableError.invalidToken(field: "tempPath", "names the token file itself: \(tempPath)")
        }
    }

    /// Removes the token file at `file` only if it still holds a token for the temporary file `tempPath`:
    /// not another download's token that replaced it meanwhile, and not a file that is no token at all (the
    /// finished download itself, when a token file and the destination were the same path).
    ///
    /// - Returns: Whether a file was removed.
    @discardableResult
    package static func removeFile(at file: URL, ifItNames tempPath: String) -> Bool {
        guard Self.file(at: file, names: tempPath) else { return false }
        // A file that takes the name between the check and the unlink is removed: moving the token aside first to
        // judge it there would close that instant, but a crash in between would leave a stray file beside the
        // finished one. The writes, which happen throughout a download, are the ones made exact (`write(to:replacing:)`).
        guard unlink(file.path) == 0 else { return false }
        DurableSteps.record(.unlink, file.path)
        return true
    }

    /// ``removeFile(at:ifItNames:)`` for a download that ends with nothing to resume, right before its temporary file
    /// is removed.
    ///
    /// - Returns: Whether the temporary file may go: false only when a token naming it is still at `file`.
    package static func removeFileBeforeItsTemporaryFile(at file: URL, naming tempPath: String) -> Bool {
        removeFile(at: file, ifItNames: tempPath) || !Self.file(at: file, names: tempPath)
    }

    /// Whether the token file at `file` holds a token for the temporary file `tempPath` (byte for byte: two
    /// canonically equivalent paths that `String ==` holds equal are two files).
    package static func file(at file: URL, names tempPath: String) -> Bool {
        guard let token = try? ResumeToken(contentsOf: file) else { return false }
        return token.tempPath.utf8.elementsEqual(tempPath.utf8)
    }

    /// The largest token file read; real tokens are well under a kilobyte.
    static let maximumFileSize = 1 << 20

    /// The bytes of the token file at `path`, read as ``init(contentsOf:)`` describes.
    private static func readTokenFile(at path: String) throws(ResumableError) -> (Data, dev_t, ino_t) {
        // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. It changes nothing for the
        // regular files that get past the check below.
        var descriptor: Int32
        repeat {
            descriptor = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        } while descriptor < 0 && errno == EINTR
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT || code == ENOTDIR {
                throw ResumableError(
                    .tokenGone, "no resume token at '\(path)': the download already finished, or the token is gone")
            }
            throw ResumableError(
                .invalidToken, "cannot read the resume token at '\(path)': \(String(cString: strerror(code)))",
                underlying: POSIXErrorCode(rawValue: code).map { POSIXError($0) })
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw ResumableError(
                .invalidToken, "cannot read the resume token at '\(path)': \(String(cString: strerror(errno)))")
        }
        guard (status.st_mode & S_IFMT) == S_IFREG else {
            throw ResumableError(.invalidToken, "'\(path)' is not a regular file, so it cannot be a resume token")
        }
        guard status.st_size <= maximumFileSize else {
            throw ResumableError(
                .invalidToken,
                "'\(path)' is \(status.st_size) bytes, too large to be a resume token (at most \(maximumFileSize))"
            )
        }
        // At most one byte more than the cap: reading it means the file grew past the cap after the check.
        var data = Data()
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while data.count <= maximumFileSize {
            let wanted = min(chunk.count, maximumFileSize + 1 - data.count)
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, wanted) }
            if count < 0 {
                if errno == EINTR { continue }
                throw ResumableError(
                    .invalidToken, "cannot read the resume token at '\(path)': \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            data.append(contentsOf: chunk[0..<count])
        }
        guard data.count <= maximumFileSize else {
            throw ResumableError(
                .invalidToken, "'\(path)' is more than \(maximumFileSize) bytes, too large to be a resume token")
        }
        return (data, status.st_dev, status.st_ino)
    }

    /// Writes the token to `file` atomically: a sibling is written and flushed, renamed over `file`, and
    /// the directory is flushed, so a crash leaves either the old token or the new one, never a torn one.
    public func write(to file: URL) throws(ResumableError) {
        try AtomicFile.write(jsonData(), to: file.path)
    }

    /// Writes the token to `file` atomically, as ``write(to:)`` does, only over what `expected` says is at `file`:
    /// nothing, or the very file (device and inode) a caller looked at and judged replaceable.
    ///
    /// - Returns: false when `file` no longer holds `expected` (something took the name, or replaced the file,
    ///   after the caller looked): nothing was replaced, and nothing of this write is left behind. Look again.
    package func write(to file: URL, replacing expected: AtomicFile.Occupant) throws(ResumableError) -> Bool {
        try AtomicFile.write(jsonData(), to: file.path, replacing: expected)
    }
}

/// Crash-safe replacement of small files.
///
/// Files are created with mode `0600` (less when the umask asks for less): a token may hold a signed URL, which
/// is as good as a password until it expires. Replacing a file never widens its mode: one that was `0400`
/// stays `0400`.
package enum AtomicFile {
    /// What is at a path, as far as a write that may replace it cares: nothing, or one file (a symbolic link too,
    /// not followed), told apart from any other by its device and inode.
    package enum Occupant: Sendable, Equatable {
        case nothing
        case file(device: UInt64, inode: UInt64)

        /// What is at `path` now (`lstat`); `nothing` also when it cannot be looked at.
        package static func at(_ path: String) -> Occupant {
            var status = stat()
            guard lstat(path, &status) == 0 else { return .nothing }
            return .file(device: UInt64(status.st_dev), inode: UInt64(status.st_ino))
        }
    }

    /// The mode a file written over `path` gets: `0600`, narrowed to the permissions of the regular file already
    /// at `path`, if any. `directory`: the descriptor `path` is relative to (`AT_FDCWD`: none).
    static func permissions(replacing path: String, in directory: Int32 = AT_FDCWD) -> Int {
        var status = stat()
        guard fstatat(directory, path, &status, AT_SYMLINK_NOFOLLOW) == 0, (status.st_mode & S_IFMT) == S_IFREG
        else { return 0o600 }
        return 0o600 & Int(status.st_mode & 0o777)
    }

    static func write(_ data: Data, to path: String) throws(ResumableError) {
        let directory = (path as NSString).deletingLastPathComponent
        try write(data, name: path, in: AT_FDCWD, path: path)
        DurableSteps.flushDirectory(directory)
    }

    /// Writes `data` over the file `name` of the directory open as `directory` (`AT_FDCWD`: `name` is a path),
    /// without flushing the directory: the caller flushes it, once for several files when it may. `path` is
    /// the file's full path, for messages. Until the directory is flushed, a crash may leave the old file.
    /// `creating`: the caller knows no file is at `name` (its mode, 0600, is not looked up).
    static func write(
        _ data: Data, name: String, in directory: Int32, path: String, creating: Bool = false
    ) throws(ResumableError) {
        let sibling = try writeSibling(data, name: name, in: directory, path: path, creating: creating)
        guard renameat(directory, sibling, directory, name) == 0 else {
            let failure = ResumableError.fileSystem("renaming to", path: path, errno: errno)
            unlinkat(directory, sibling, 0)
            throw failure
        }
        DurableSteps.record(.tokenWrite, path)
    }

    /// Creates `name`'s sibling `name.writing` afresh, writes `data` into it and flushes it; returns the sibling's
    /// name (relative to `directory`, like `name`). On failure nothing is left behind.
    private static func writeSibling(
        _ data: Data, name: String, in directory: Int32, path: String, creating: Bool
    ) throws(ResumableError) -> String {
        // One fixed sibling name: a writer killed half way leaves it behind, and the next write replaces it.
        let sibling = name + ".writing"
        let siblingPath = path + ".writing"
        // Always a fresh sibling, so that it gets the mode below whatever a killed writer left behind (a file of
        // another mode, or a hard link to another file, is never reused or truncated): created exclusively, and
        // one left behind is unlinked first. Another process writing the same token may create it in between: a
        // few tries, then report it.
        let mode = mode_t(creating ? 0o600 : permissions(replacing: name, in: directory))
        var descriptor: Int32 = -1
        var code: Int32 = 0
        for _ in 0..<4 {
            descriptor = openat(directory, sibling, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
            code = errno
            if descriptor >= 0 || (code != EEXIST && code != EINTR) { break }
            if code == EEXIST { unlinkat(directory, sibling, 0) }
        }
        guard descriptor >= 0 else { throw .fileSystem("creating", path: siblingPath, errno: code) }
        var failure: ResumableError?
        data.withUnsafeBytes { buffer in
            guard let base = buffer.baseAddress else { return }
            var written = 0
            while written < buffer.count {
                #if canImport(Glibc)
                    let count = Glibc.write(descriptor, base.advanced(by: written), buffer.count - written)
                #else
                    let count = Darwin.write(descriptor, base.advanced(by: written), buffer.count - written)
                #endif
                if count < 0 {
                    if errno == EINTR { continue }
                    failure = .fileSystem("writing", path: siblingPath, errno: errno)
                    return
                }
                written += count
            }
        }
        if failure == nil, fsync(descriptor) != 0 {
            failure = .fileSystem("flushing", path: siblingPath, errno: errno)
        }
        close(descriptor)
        if let failure {
            unlinkat(directory, sibling, 0)
            throw failure
        }
        return sibling
    }

    /// Writes `data` over `path` as ``write(_:to:)`` does, only over what `expected` says is there; false (nothing
    /// replaced, nothing left behind) when `path` no longer holds it.
    ///
    /// No instant at which another file can be replaced: over nothing, the rename fails when the name is taken
    /// (`renameat2(RENAME_NOREPLACE)`; `link` where that is missing); over a file, the new one is swapped with what
    /// is there (`renameat2(RENAME_EXCHANGE)`), and what came out is checked: the expected file is removed, anything
    /// else is swapped back. Only where neither call exists is it a check, then a rename (the best available).
    static func write(_ data: Data, to path: String, replacing expected: Occupant) throws(ResumableError) -> Bool {
        let sibling = try writeSibling(data, name: path, in: AT_FDCWD, path: path, creating: expected == .nothing)
        func unsupported(_ code: Int32) -> Bool {
            code == EINVAL || code == ENOSYS || code == ENOTSUP || code == EOPNOTSUPP
        }
        func discard() { unlink(sibling) }
        switch expected {
        case .nothing:
            let code = cresumable_rename_noreplace(sibling, path)
            if code == EEXIST {
                discard()
                return false
            }
            if code != 0, unsupported(code) {
                // link(2) fails with EEXIST instead of replacing: an atomic "create if absent".
                guard link(sibling, path) == 0 else {
                    let linkCode = errno
                    discard()
                    if linkCode == EEXIST { return false }
                    throw .fileSystem("writing", path: path, errno: linkCode)
                }
                discard()
            } else if code != 0 {
                discard()
                throw .fileSystem("renaming to", path: path, errno: code)
            }
        case .file:
            let code = cresumable_rename_exchange(sibling, path)
            if code == ENOENT {
                // The expected file is gone: the name is free, or about to be taken; look again.
                discard()
                return false
            }
            if code != 0, unsupported(code) {
                guard Occupant.at(path) == expected else {
                    discard()
                    return false
                }
                guard rename(sibling, path) == 0 else {
                    let renameCode = errno
                    discard()
                    throw .fileSystem("renaming to", path: path, errno: renameCode)
                }
            } else if code != 0 {
                discard()
                throw .fileSystem("renaming to", path: path, errno: code)
            } else if Occupant.at(sibling) != expected {
                // Another file took the name after the caller looked: it goes back, and the new token goes.
                let back = cresumable_rename_exchange(sibling, path)
                guard back == 0 else {
                    throw ResumableError(
                        .fileSystem,
                        "'\(path)' changed while a token was written over it, and could not be put back: the file that "
                            + "was there is now '\(sibling)' (\(String(cString: strerror(back))))")
                }
                discard()
                return false
            } else {
                // The expected file, now under the sibling's name.
                discard()
            }
        }
        DurableSteps.record(.tokenWrite, path)
        DurableSteps.flushDirectory((path as NSString).deletingLastPathComponent)
        return true
    }
}
