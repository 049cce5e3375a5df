import CResumable
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
        prefix + UUID.random().uuidString.lowercased() + suffix
    }

    /// Whether `name` is a name ``make()`` could have produced.
    static func isValid(_ name: String) -> Bool {
        guard name.hasPrefix(prefix), name.hasSuffix(suffix) else { return false }
        let middle = name.dropFirst(prefix.count).dropLast(suffix.count)
        guard middle.count == 36, let uuid = UUID(uuidString: String(middle)) else { return false }
        return uuid.uuidString.lowercased() == middle
    }
}

extension UUID {
    /// A random (version 4) UUID from the kernel's generator in one call. Foundation's `UUID()` opens, reads and
    /// closes `/dev/urandom` for each one on Linux: three system calls for every download's identifier and
    /// temporary file.
    static func random() -> UUID {
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let filled = withUnsafeMutableBytes(of: &uuid) { bytes in
            cresumable_random_bytes(bytes.baseAddress, bytes.count) == 0
        }
        guard filled else { return UUID() }
        withUnsafeMutableBytes(of: &uuid) { bytes in
            bytes[6] = (bytes[6] & 0x0F) | 0x40  // version 4
            bytes[8] = (bytes[8] & 0x3F) | 0x80  // variant 1 (RFC 9562)
        }
        return UUID(uuid: uuid)
    }
}
