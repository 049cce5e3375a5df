import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Maps request paths to regular files under a root directory, refusing to leave it.
enum StaticFileResolver {
    /// The outcome of resolving a path.
    enum Resolution: Equatable {
        /// A regular file inside the root.
        case file(URL)
        /// A traversal attempt (`..`, an escaping symbolic link) or a malformed escape.
        case forbidden
        /// Nothing servable there.
        case notFound
    }

    /// Resolves a raw (percent-encoded) request path against `root`.
    static func resolve(path: String, root: URL) -> Resolution {
        guard let decoded = PercentDecoding.decodeString(path) else { return .forbidden }
        let components = decoded.split(separator: "/", omittingEmptySubsequences: true)
        if components.contains(where: { $0 == ".." || $0.contains("\\") }) { return .forbidden }
        let meaningful = components.filter { $0 != "." }
        guard !meaningful.isEmpty else { return .notFound }
        guard let rootReal = realPath(root.path) else { return .notFound }
        var candidate = rootReal
        for component in meaningful {
            candidate += "/" + component
        }
        guard let resolved = realPath(candidate) else { return .notFound }
        // Byte for byte (`hasPrefix` holds canonically equivalent names equal, which are two directories).
        guard resolved.utf8.starts(with: (rootReal == "/" ? "/" : rootReal + "/").utf8) else { return .forbidden }
        guard let info = FileInfo.of(path: resolved), info.isRegularFile else { return .notFound }
        return .file(URL(fileURLWithPath: resolved))
    }

    /// The canonical absolute path (symbolic links resolved), or `nil` when it does not exist.
    private static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
