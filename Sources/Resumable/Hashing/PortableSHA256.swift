import CResumable
import Foundation

/// SHA-256 digests (FIPS 180-4): incrementally as a copyable value with the package's own portable C code, and of a
/// whole file with the fastest code at hand (``SHA256Hasher``: libcrypto when it loads, else the portable code).
///
/// The value type serves the command-line tool and the tests on small data; files, and the engine, go through
/// ``SHA256Hasher``. Not public API: the name must not shadow CryptoKit's `SHA256` in code that imports both, and
/// apps have better SHA-256 implementations at hand.
package struct PortableSHA256: Sendable {
    private var context = cresumable_sha256_context()

    /// A fresh digest.
    package init() {
        cresumable_sha256_init(&context)
    }

    /// Adds `bytes` to the digest.
    package mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        cresumable_sha256_update(&context, base, bytes.count)
    }

    /// Adds `bytes` to the digest.
    package mutating func update(_ bytes: some ContiguousBytes) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// The digest of everything added, as lowercase hex. The value itself is not changed.
    package func hexDigest() -> String {
        var copy = context
        var digest = [UInt8](repeating: 0, count: 32)
        cresumable_sha256_final(&copy, &digest)
        return digest.map { String(format: "%02x", $0) }.joined()
    }

    /// The lowercase hex SHA-256 of the file at `url`, through ``SHA256Hasher`` (libcrypto when it loads).
    package static func hex(ofFileAt url: URL) throws(ResumableError) -> String {
        try SHA256Hasher.hex(ofFileAt: url.path)
    }

    /// The lowercase hex SHA-256 of everything `descriptor` holds, through ``SHA256Hasher``.
    static func hex(ofDescriptor descriptor: Int32, path: String) throws(ResumableError) -> String {
        try SHA256Hasher.hex(ofDescriptor: descriptor, path: path)
    }
}
