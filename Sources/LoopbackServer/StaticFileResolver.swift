import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Maps request paths to regular files under a root directory, refusing to leave it and keeping hidden files
/// (any path segment that starts with `.`) out of reach.
package enum StaticFileResolver {
    /// The outcome of resolving a path.
    enum Resolution: Equatable {
        /// A regular file inside the root.
        case file(URL)
        /// A traversal attempt (`..`, an escaping symbolic link) or a malformed escape.
        case forbidden
        /// Nothing servable there: no such regular file, or a hidden one (see ``isHidden(_:)``).
        case notFound
    }

    /// Resolves a raw (percent-encoded) request path against `root`.
    ///
    /// A hidden path is not found, whether the request names it (`/.resumable-state/…`, `/sub/.git/config`,
    /// `/%2Ehidden`) or a symbolic link leads there: a directory served to try downloads holds a batch's state
    /// directory, whose tokens name absolute paths, and dotfiles nobody meant to publish.
    static func resolve(path: String, root: URL) -> Resolution {
        guard let decoded = PercentDecoding.decodeString(path) else { return .forbidden }
        let components = decoded.split(separator: "/", omittingEmptySubsequences: true)
        if components.contains(where: { $0 == ".." || $0.contains("\\") }) { return .forbidden }
        let meaningful = components.filter { $0 != "." }
        guard !meaningful.contains(where: isHidden) else { return .notFound }
        guard !meaningful.isEmpty else { return .notFound }
        guard let rootReal = realPath(root.path) else { return .notFound }
        var candidate = rootReal
        for component in meaningful {
            candidate += "/" + component
        }
        guard let resolved = realPath(candidate) else { return .notFound }
        // Byte for byte (`hasPrefix` holds canonically equivalent names equal, which are two directories).
        let prefix = rootReal == "/" ? "/" : rootReal + "/"
        guard resolved.utf8.starts(with: prefix.utf8) else { return .forbidden }
        // Where a symbolic link led, below the root (the root itself may well lie in a hidden directory).
        let inside = String(decoding: resolved.utf8.dropFirst(prefix.utf8.count), as: UTF8.self)
        guard !isHidden(relativePath: inside) else { return .notFound }
        guard let info = FileInfo.of(path: resolved), info.isRegularFile else { return .notFound }
        return .file(URL(fileURLWithPath: resolved))
    }

    /// Whether a path segment names a hidden file or directory: it starts with `.` (`.` and `..` themselves are
    /// not names; ``resolve(path:root:)`` skips the one and refuses the other).
    package static func isHidden(_ segment: Substring) -> Bool {
        segment.first == "." && segment != "." && segment != ".."
    }

    /// Whether a path relative to the served directory (`sub/.x/file`) goes through a hidden segment, so that
    /// ``resolve(path:root:)`` does not serve it; `resumable serve` leaves such files out of its listing.
    package static func isHidden(relativePath: String) -> Bool {
        relativePath.split(separator: "/").contains(where: isHidden)
    }

    /// The canonical absolute path (symbolic links resolved), or `nil` when it does not exist.
    private static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
