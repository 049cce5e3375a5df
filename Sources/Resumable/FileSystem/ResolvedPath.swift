import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Paths with every symbolic link resolved (`realpath`), for the checks that must see where a path really leads.
enum ResolvedPath {
    /// `path` resolved, when it exists.
    static func of(_ path: String) -> String? {
        guard let pointer = realpath(path.isEmpty ? "." : path, nil) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    /// `path` resolved through its deepest existing ancestor (a destination directory may not exist yet).
    static func throughExistingAncestors(_ path: String) -> String? {
        var head = path
        var tail: [String] = []
        while !head.isEmpty, head != "/" {
            if let resolved = of(head) {
                return tail.reversed().reduce(resolved) { ($0 as NSString).appendingPathComponent($1) }
            }
            tail.append((head as NSString).lastPathComponent)
            head = (head as NSString).deletingLastPathComponent
        }
        return of("/").map { root in tail.reversed().reduce(root) { ($0 as NSString).appendingPathComponent($1) } }
    }
}
