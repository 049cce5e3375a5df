#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The `stat` facts the server needs about a file.
struct FileInfo: Sendable, Equatable {
    /// The size in bytes.
    var size: Int64
    /// The modification time in nanoseconds since the Unix epoch.
    var modificationNanoseconds: Int64
    /// The inode number.
    var inode: UInt64
    /// Whether the file is a regular file.
    var isRegularFile: Bool

    /// The strong ETag `"<hex size>-<hex mtime nanoseconds>-<hex inode>"`, quotes included.
    var etag: String {
        let size = String(UInt64(bitPattern: size), radix: 16)
        let mtime = String(UInt64(bitPattern: modificationNanoseconds), radix: 16)
        return "\"\(size)-\(mtime)-\(String(inode, radix: 16))\""
    }

    /// The modification time as an IMF-fixdate.
    var lastModified: String {
        HTTPDate.format(secondsSince1970: modificationNanoseconds / 1_000_000_000)
    }

    init(_ status: stat) {
        size = Int64(status.st_size)
        #if canImport(Darwin)
            let seconds = Int64(status.st_mtimespec.tv_sec)
            let nanos = Int64(status.st_mtimespec.tv_nsec)
        #else
            let seconds = Int64(status.st_mtim.tv_sec)
            let nanos = Int64(status.st_mtim.tv_nsec)
        #endif
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        modificationNanoseconds = overflow ? seconds : product &+ nanos
        inode = UInt64(status.st_ino)
        isRegularFile = (status.st_mode & S_IFMT) == S_IFREG
    }

    /// `stat` of the file at `path` (following symbolic links), or `nil`.
    static func of(path: String) -> FileInfo? {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        return FileInfo(status)
    }

    /// `fstat` of an open descriptor, or `nil`.
    static func of(descriptor: Int32) -> FileInfo? {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return nil }
        return FileInfo(status)
    }
}
