import CResumable
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The temporary file a download streams into, held open and exclusively locked while in use.
///
/// Opened without following symlinks and only when it is a regular file; locked with `flock` so a second
/// task or process resuming the same token fails at once instead of interleaving writes. Writes are
/// positional (`pwrite`), so the offset on disk never depends on a shared file position.
final class PartialFile: Sendable {
    /// The file's absolute path.
    let path: String
    private let descriptor: Int32
    private let released = Atomic<Bool>(false)
    /// The `errno` of the first flush that failed, 0 while none did: see ``synchronize()``.
    private let flushFailure = Atomic<Int32>(0)
    /// Whether the file's name in its directory was flushed: see ``synchronize()``.
    private let nameFlushed = Atomic<Bool>(false)

    private init(path: String, descriptor: Int32) {
        self.path = path
        self.descriptor = descriptor
    }

    deinit {
        release()
    }

    /// Closes the file, which releases its lock. No other method may be called afterwards.
    func release() {
        guard !released.exchange(true, ordering: .acquiringAndReleasing) else { return }
        // Unlock explicitly: a child process forked meanwhile (until it execs) holds a copy of the descriptor,
        // and closing ours alone would keep the lock, so a resume right after a pause would find it in use.
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }

    /// Creates a new, empty temporary file in `directory`, named as ``TemporaryFileName`` says.
    static func create(in directory: String) throws(ResumableError) -> PartialFile {
        try create(at: (directory as NSString).appendingPathComponent(TemporaryFileName.make()))
    }

    /// A new file at `path`, which must not exist (nor be a symbolic link).
    private static func create(at path: String) throws(ResumableError) -> PartialFile {
        let descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw .fileSystem("creating", path: path, errno: errno) }
        DurableSteps.record(.create, path)
        let file = PartialFile(path: path, descriptor: descriptor)
        try file.lock()
        return file
    }

    /// Opens the temporary file a token names, refusing symlinks, anything but a regular file, a file with
    /// other hard links or of another user, and a file that another task holds.
    static func openExisting(at path: String) throws(ResumableError) -> PartialFile {
        let descriptor = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else { throw openError(path, errno: errno) }
        let file = PartialFile(path: path, descriptor: descriptor)
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw .fileSystem("inspecting", path: path, errno: errno) }
        try checkOwnership(status, path: path)
        try file.lock()
        return file
    }

    /// The error for a temporary file that could not be opened or inspected.
    static func openError(_ path: String, errno code: Int32) -> ResumableError {
        switch code {
        case ENOENT:
            return ResumableError(
                .tokenGone,
                "the temporary file '\(path)' is gone: the download already finished or was discarded"
            )
        case ELOOP:
            return ResumableError(.invalidToken, "the temporary file '\(path)' is a symbolic link")
        case EISDIR, ENXIO, ENODEV, EOPNOTSUPP:
            // A directory, a socket, a device: opening for writing fails before the type can be checked.
            return ResumableError(.invalidToken, "the temporary file '\(path)' is not a regular file")
        default:
            return .fileSystem("opening", path: path, errno: code)
        }
    }

    /// Throws unless `status` describes a file this library could have created: a regular file with one
    /// name, belonging to this user. A hard link planted under our naming would otherwise let a crafted
    /// token truncate or overwrite another file.
    static func checkOwnership(_ status: stat, path: String) throws(ResumableError) {
        guard (status.st_mode & S_IFMT) == S_IFREG else {
            throw ResumableError(.invalidToken, "the temporary file '\(path)' is not a regular file")
        }
        guard status.st_nlink == 1 else {
            throw ResumableError(.invalidToken, "the temporary file '\(path)' has other hard links")
        }
        guard status.st_uid == geteuid() else {
            throw ResumableError(.invalidToken, "the temporary file '\(path)' belongs to another user")
        }
    }

    private func lock() throws(ResumableError) {
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            if code == EWOULDBLOCK {
                throw ResumableError(
                    .tokenInUse,
                    "the temporary file '\(path)' is in use by another download (task or process)"
                )
            }
            throw .fileSystem("locking", path: path, errno: code)
        }
    }

    /// The file's current size in bytes.
    func size() throws(ResumableError) -> Int64 {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw .fileSystem("inspecting", path: path, errno: errno) }
        return Int64(status.st_size)
    }

    /// Cuts the file to `length` bytes.
    func truncate(to length: Int64) throws(ResumableError) {
        while ftruncate(descriptor, off_t(length)) != 0 {
            guard errno == EINTR else { throw .fileSystem("truncating", path: path, errno: errno) }
        }
        DurableSteps.record(.truncate, path)
    }

    /// Extends the file to `length` bytes, allocating its blocks where the file system can, so that segments
    /// written at their own offsets neither fragment the file nor find the disk full half way.
    func preallocate(length: Int64) throws(ResumableError) {
        let code = cresumable_preallocate(descriptor, length)
        guard code == 0 else { throw .fileSystem("preallocating", path: path, errno: code) }
        DurableSteps.record(.truncate, path)
    }

    /// Writes all of `buffer` at `offset`.
    func write(_ buffer: UnsafeRawBufferPointer, at offset: Int64) throws(ResumableError) {
        guard var base = buffer.baseAddress else { return }
        var remaining = buffer.count
        var position = off_t(offset)
        while remaining > 0 {
            let written = pwrite(descriptor, base, remaining, position)
            if written < 0 {
                if errno == EINTR { continue }
                throw .fileSystem("writing", path: path, errno: errno)
            }
            if written == 0 {
                throw .fileSystem("writing", path: path, errno: EIO)
            }
            remaining -= written
            position += off_t(written)
            base = base.advanced(by: written)
        }
        DurableSteps.record(.write, path)
    }

    /// Flushes written data to stable storage.
    ///
    /// `fdatasync` on Linux. On Darwin `fsync` only hands the data to the drive, whose cache may still lose it:
    /// `F_FULLFSYNC` asks the drive to flush too, and where a file system does not support it, `fsync` is the best
    /// there is.
    ///
    /// A flush that failed fails every later flush of this file: Linux reports a failed writeback to `fdatasync`
    /// once, marks the pages it could not write clean (their data is gone) and returns 0 from the next call, so a
    /// flush that succeeds after a failed one says nothing about the bytes written before (PostgreSQL's "fsyncgate").
    /// No token may then cover a byte past the last flush that succeeded.
    ///
    /// The first flush that succeeds also flushes the file's directory: `fdatasync` makes the bytes durable, not the
    /// name through which a token finds them. Every token that counts on those bytes is handed out after a flush, and
    /// after a crash it must find its file: on file systems whose flush of one file does not commit the creation of
    /// another (btrfs, for one), the token could outlive the name and its bytes be lost. A directory flush that fails
    /// counts as a failed flush; one that cannot be tried (a directory the user may write into but not read, no
    /// descriptor left, a file system that cannot flush directories) does not, and is tried again at the next flush.
    func synchronize() throws(ResumableError) {
        let earlier = flushFailure.load(ordering: .acquiring)
        guard earlier == 0 else { throw .fileSystem("flushing (it failed before)", path: path, errno: earlier) }
        var result: Int32 = 0
        var code: Int32 = 0
        #if DEBUG
            if let injected = DurableSteps.injectedFailure(.flush, path) {
                result = -1
                code = injected
            }
        #endif
        if result == 0 {
            #if canImport(Glibc)
                result = fdatasync(descriptor)
            #elseif canImport(Darwin)
                result = fcntl(descriptor, F_FULLFSYNC) == 0 ? 0 : fsync(descriptor)
            #else
                result = fsync(descriptor)
            #endif
            code = errno
        }
        guard result == 0 else {
            flushFailure.store(code, ordering: .releasing)
            throw .fileSystem("flushing", path: path, errno: code)
        }
        DurableSteps.record(.flush, path)
        guard !nameFlushed.load(ordering: .acquiring) else { return }
        let directory = (path as NSString).deletingLastPathComponent
        switch DurableSteps.flushDirectory(directory) {
        case .flushed:
            nameFlushed.store(true, ordering: .releasing)
            DurableSteps.record(.flushDirectory, directory)
        case .notOpened:
            // Not tried: a directory this user may write into but not list (mode -wx, a drop box), or no descriptor
            // left. The name stays as every download before this flush left it; the next flush tries again.
            return
        case .failed(let code) where code == EINVAL:
            // A file system that cannot flush a directory: nothing more can be done for the name there.
            nameFlushed.store(true, ordering: .releasing)
        case .failed(let code):
            flushFailure.store(code, ordering: .releasing)
            throw .fileSystem("flushing the directory of", path: path, errno: code)
        }
    }

    /// Asks the kernel to start writing `count` bytes at `offset` to disk, without waiting.
    ///
    /// Spreads the cost of the final flush over the download; a failure is harmless (the final flush still
    /// happens), so it is ignored.
    func startWriteback(offset: Int64, count: Int64) {
        _ = cresumable_start_writeback(descriptor, offset, count)
    }

    /// The lowercase hex SHA-256 of the file's contents (libcrypto when it loads, see ``SHA256Hasher``).
    func sha256() throws(ResumableError) -> String {
        try SHA256Hasher.hex(ofDescriptor: descriptor, path: path)
    }

    /// Reads up to `buffer.count` bytes at `offset` into `buffer` (`pread`); returns how many, 0 at the end of the
    /// file. May return fewer than asked. Throws once the file is released (a reader must still be stopped before
    /// ``release()``: a descriptor closed during the check could be reused by another file).
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(ResumableError) -> Int {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        while true {
            guard !released.load(ordering: .acquiring) else {
                throw ResumableError(.fileSystem, "reading '\(path)' failed: the file was closed")
            }
            let count = pread(descriptor, base, buffer.count, off_t(offset))
            if count >= 0 { return count }
            guard errno == EINTR else { throw .fileSystem("reading", path: path, errno: errno) }
        }
    }

    /// A copy of this file's bytes in `ranges` in a new temporary file in `directory`, at the same offsets, flushed
    /// with the directory's entry, for a resume into another directory (see
    /// ``DownloadTask/resume(from:destination:replacingURL:configuration:)``). This file is left as it is; on failure
    /// the copy is removed.
    ///
    /// Only the bytes a token claims are copied: a preallocated file of a multi-connection download is mostly blocks
    /// that hold nothing yet, and copying them would cost the whole file's length however little was downloaded.
    /// The kernel copies (`copy_file_range`), so the bytes do not pass through this process.
    func copy(_ ranges: ByteRangeSet, into directory: String) throws(ResumableError) -> PartialFile {
        let copy = try PartialFile.create(in: directory)
        do throws(ResumableError) {
            guard !released.load(ordering: .acquiring) else {
                throw ResumableError(.fileSystem, "copying '\(path)' failed: the file was closed")
            }
            for range in ranges.ranges {
                let length = range.upperBound - range.lowerBound
                let copied = cresumable_copy_range(descriptor, copy.descriptor, range.lowerBound, length)
                if copied < 0 { throw .fileSystem("copying", path: path, errno: Int32(clamping: -copied)) }
                guard copied == length else {
                    throw ResumableError(
                        .fileSystem,
                        "copying '\(path)' failed: it ended at \(range.lowerBound + copied), before \(range.upperBound)"
                    )
                }
                DurableSteps.record(.write, copy.path)
            }
            // Its data, then its name (``synchronize()`` flushes the directory the first time).
            try copy.synchronize()
        } catch {
            copy.remove()
            copy.release()
            throw error
        }
        return copy
    }

    /// Removes the file from its directory (the descriptor stays valid until released).
    func remove() {
        if unlink(path) == 0 { DurableSteps.record(.unlink, path) }
    }

    /// Moves the finished file to `destination`, atomically, never leaving a partial file there.
    ///
    /// With `replacing` an existing file is replaced; otherwise a taken name fails with `EEXIST`, so the
    /// caller can choose another. Without replacing, the move is one `renameat2(RENAME_NOREPLACE)` (Darwin:
    /// `renamex_np(RENAME_EXCL)`): there is
    /// no instant at which the file has two names (where that call is missing, `link` then `unlink`). Across
    /// file systems the data is copied to a sibling of the destination first, then moved the same way.
    ///
    /// Once moved, the destination's directory is flushed, so that the new name is on disk before the caller
    /// removes what said the download was unfinished (a token file, a task record): otherwise a crash could keep the
    /// removal and lose the rename, and the finished file would be back under a temporary name nothing names.
    func move(to destination: String, replacing: Bool) throws(ResumableError) {
        // A rename goes by path: the file there must still be the one this download wrote through its descriptor,
        // or another file (a token written over the path, a file swapped in) would become the finished download.
        guard Self.names(path, descriptor) else {
            throw ResumableError(
                .fileSystem,
                "the temporary file '\(path)' was replaced by another file while the download wrote it; "
                    + "nothing was moved into place")
        }
        var code = Self.rename(path, to: destination, replacing: replacing)
        if code == 0 {
            DurableSteps.flushDirectory((destination as NSString).deletingLastPathComponent)
            return
        }
        if code == EXDEV {
            let copy = try copyBeside(destination)
            defer { copy.release() }
            // The copy's name must still be the file written here: another process finishing a copy of this download
            // (a store restored from a backup) may have replaced it.
            guard Self.names(copy.path, copy.descriptor) else {
                throw ResumableError(
                    .fileSystem,
                    "the copy '\(copy.path)' was replaced by another file while this download wrote it; "
                        + "nothing was moved into place")
            }
            code = Self.rename(copy.path, to: destination, replacing: replacing)
            guard code == 0 else {
                copy.remove()
                throw .fileSystem("moving to", path: destination, errno: code)
            }
            DurableSteps.flushDirectory((destination as NSString).deletingLastPathComponent)
            remove()
            return
        }
        throw .fileSystem(replacing ? "renaming to" : "moving to", path: destination, errno: code)
    }

    /// Renames `source` to `destination`; returns 0 or an errno value (`EEXIST` when not replacing a taken
    /// name).
    private static func rename(_ source: String, to destination: String, replacing: Bool) -> Int32 {
        if replacing {
            guard Self.systemRename(source, destination) == 0 else { return errno }
            DurableSteps.record(.rename, destination)
            return 0
        }
        let code = cresumable_rename_noreplace(source, destination)
        if code == 0 {
            DurableSteps.record(.rename, destination)
            return 0
        }
        guard code == EINVAL || code == ENOSYS || code == ENOTSUP || code == EOPNOTSUPP else { return code }
        // No renameat2 here: link(2) fails with EEXIST instead of replacing, an atomic "create if absent".
        if link(source, destination) == 0 {
            DurableSteps.record(.link, destination)
            unlink(source)
            DurableSteps.record(.unlink, source)
            return 0
        }
        let linkCode = errno
        guard linkCode == EPERM || linkCode == ENOTSUP || linkCode == EOPNOTSUPP else { return linkCode }
        // File systems without hard links: check, then rename (not atomic, the best available).
        if access(destination, F_OK) == 0 { return EEXIST }
        guard Self.systemRename(source, destination) == 0 else { return errno }
        DurableSteps.record(.rename, destination)
        return 0
    }

    /// rename(2), which replaces `destination`; 0 or -1 with `errno` set.
    private static func systemRename(_ source: String, _ destination: String) -> Int32 {
        #if canImport(Glibc)
            Glibc.rename(source, destination)
        #else
            Darwin.rename(source, destination)
        #endif
    }

    /// Whether `path` (not followed if a symbolic link) is the file open as `descriptor`: nothing was swapped in.
    private static func names(_ path: String, _ descriptor: Int32) -> Bool {
        var atPath = stat()
        var held = stat()
        return lstat(path, &atPath) == 0 && fstat(descriptor, &held) == 0 && atPath.st_dev == held.st_dev
            && atPath.st_ino == held.st_ino
    }

    /// Copies the whole file into a new temporary sibling of `destination` and returns the copy, open and locked.
    ///
    /// The copy has this file's own name (`.resumable-<UUID>.partial`), in the destination's directory: a crash
    /// before its rename leaves it where the next finish of the same download, the only one that can hold this file
    /// (``lock()``), finds it, removes it and copies again. A random name would leave every such copy behind, a
    /// whole file each, which nothing names. Only a file of exactly that name is removed, never a directory.
    private func copyBeside(_ destination: String) throws(ResumableError) -> PartialFile {
        let directory = (destination as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        guard TemporaryFileName.isValid(name) else {
            throw ResumableError(.fileSystem, "copying '\(path)' failed: not a temporary file of this library")
        }
        let copyPath = (directory as NSString).appendingPathComponent(name)
        let length = try size()
        let copy: PartialFile
        do throws(ResumableError) {
            copy = try PartialFile.create(at: copyPath)
        } catch {
            guard (error.underlying as? POSIXError)?.code == .EEXIST else { throw error }
            try Self.removeLeftoverCopy(at: copyPath)
            copy = try PartialFile.create(at: copyPath)
        }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var offset: Int64 = 0
        while offset < length {
            let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, off_t(offset)) }
            if count < 0 {
                if errno == EINTR { continue }
                let code = errno
                copy.remove()
                copy.release()
                throw .fileSystem("reading", path: path, errno: code)
            }
            if count == 0 { break }
            let written = buffer.withUnsafeBytes { bytes in
                Result { () throws(ResumableError) in
                    try copy.write(UnsafeRawBufferPointer(rebasing: bytes[0..<count]), at: offset)
                }
            }
            if case .failure(let error) = written {
                copy.remove()
                copy.release()
                throw error
            }
            offset += Int64(count)
        }
        do throws(ResumableError) {
            try copy.synchronize()
        } catch {
            copy.remove()
            copy.release()
            throw error
        }
        return copy
    }

    /// Removes a copy an interrupted finish left at `path` (or a symbolic link of that name), unless a download holds
    /// it: a copy being written is locked by its writer (``lock()``), and is never removed from under it.
    static func removeLeftoverCopy(at path: String) throws(ResumableError) {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        if descriptor < 0 {
            let code = errno
            if code == ENOENT { return }
            // A symbolic link (or a name that cannot be opened to be checked): only a link is removed, by its name.
            guard code == ELOOP else { throw .fileSystem("inspecting", path: path, errno: code) }
        } else {
            defer { close(descriptor) }
            var held = stat()
            guard fstat(descriptor, &held) == 0, (held.st_mode & S_IFMT) == S_IFREG else {
                throw ResumableError(.fileSystem, "'\(path)' is in the way of a copy and is not a regular file")
            }
            guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
                throw ResumableError(
                    .tokenInUse, "the copy '\(path)' is being written by another download (task or process)")
            }
            // Still the file checked: not one another process put there since.
            guard names(path, descriptor) else {
                throw ResumableError(.tokenInUse, "the copy '\(path)' changed while it was checked")
            }
        }
        guard unlink(path) == 0 else { throw .fileSystem("removing", path: path, errno: errno) }
        DurableSteps.record(.unlink, path)
    }
}
