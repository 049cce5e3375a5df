import Foundation

/// How this library names its temporary files: `.resumable-<UUID>.partial`.
///
/// A token may only ever point at a file named this way, so a crafted token cannot aim the library at
/// an arbitrary file.
enum TemporaryFileName {
    static let prefix = ".resumable-"
    static let suffix = ".partial"

    /// A fresh name.
    static func make() -> String {
        prefix + UUID().uuidString.lowercased() + suffix
    }

    /// Whether `name` is a name ``make()`` could have produced.
    static func isValid(_ name: String) -> Bool {
        guard name.hasPrefix(prefix), name.hasSuffix(suffix) else { return false }
        let middle = name.dropFirst(prefix.count).dropLast(suffix.count)
        guard middle.count == 36, let uuid = UUID(uuidString: String(middle)) else { return false }
        return uuid.uuidString.lowercased() == middle
    }
}
