import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension ResumeToken {
    /// Reads and validates a token from a JSON file.
    ///
    /// - Throws: ``ResumableError`` with code ``ResumableError/Code/tokenGone`` when the file does not exist
    ///   (the download finished, or the token was discarded), or ``ResumableError/Code/invalidToken``.
    public init(contentsOf file: URL) throws(ResumableError) {
        let data: Data
        do {
            let size = try FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int ?? 0
            guard size <= Self.maximumFileSize else {
                throw ResumableError(
                    .invalidToken,
                    "'\(file.path)' is \(size) bytes, too large to be a resume token (at most \(Self.maximumFileSize))"
                )
            }
            data = try Data(contentsOf: file)
        } catch let error as ResumableError {
            throw error
        } catch {
            if !FileManager.default.fileExists(atPath: file.path) {
                throw ResumableError(
                    .tokenGone,
                    "no resume token at '\(file.path)': the download already finished, or the token is gone"
                )
            }
            throw ResumableError(.invalidToken, "cannot read the resume token at '\(file.path)'", underlying: error)
        }
        try self.init(jsonData: data)
    }

    /// The largest token file read; real tokens are well under a kilobyte.
    static let maximumFileSize = 1 << 20

    /// Writes the token to `file` atomically: a sibling is written and flushed, renamed over `file`, and
    /// the directory is flushed, so a crash leaves either the old token or the new one, never a torn one.
    public func write(to file: URL) throws(ResumableError) {
        try AtomicFile.write(jsonData(), to: file.path)
    }
}

/// Crash-safe replacement of small files.
enum AtomicFile {
    static func write(_ data: Data, to path: String) throws(ResumableError) {
        let directory = (path as NSString).deletingLastPathComponent
        // One fixed sibling name: a writer killed half way leaves it behind, and the next write replaces it.
        let sibling = path + ".writing"
        let descriptor = open(sibling, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw .fileSystem("creating", path: sibling, errno: errno) }
        var failure: ResumableError?
        data.withUnsafeBytes { buffer in
            guard let base = buffer.baseAddress else { return }
            var written = 0
            while written < buffer.count {
                let count = Glibc.write(descriptor, base.advanced(by: written), buffer.count - written)
                if count < 0 {
                    if errno == EINTR { continue }
                    failure = .fileSystem("writing", path: sibling, errno: errno)
                    return
                }
                written += count
            }
        }
        if failure == nil, fsync(descriptor) != 0 {
            failure = .fileSystem("flushing", path: sibling, errno: errno)
        }
        close(descriptor)
        if failure == nil, rename(sibling, path) != 0 {
            failure = .fileSystem("renaming to", path: path, errno: errno)
        }
        if let failure {
            unlink(sibling)
            throw failure
        }
        let directoryDescriptor = open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryDescriptor >= 0 {
            fsync(directoryDescriptor)
            close(directoryDescriptor)
        }
    }
}
