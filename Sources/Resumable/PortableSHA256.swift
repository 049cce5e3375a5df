import CResumable
import Foundation

/// SHA-256 digests (FIPS 180-4), incrementally or of a whole file, with the package's own C implementation.
///
/// Used to verify a finished download before it is moved into place (``DownloadTask/Configuration/expectedSHA256``),
/// and by the command-line tool and the tests. Not public API: the name must not shadow CryptoKit's `SHA256` in
/// code that imports both, and apps have better SHA-256 implementations at hand.
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

    /// The lowercase hex SHA-256 of the file at `url`.
    package static func hex(ofFileAt url: URL) throws(ResumableError) -> String {
        let descriptor = open(url.path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .fileSystem("opening", path: url.path, errno: errno) }
        defer { close(descriptor) }
        return try hex(ofDescriptor: descriptor, path: url.path)
    }

    static func hex(ofDescriptor descriptor: Int32, path: String) throws(ResumableError) -> String {
        var digest = PortableSHA256()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var offset: off_t = 0
        while true {
            let count = pread(descriptor, buffer.baseAddress, buffer.count, offset)
            if count < 0 {
                if errno == EINTR { continue }
                throw .fileSystem("reading", path: path, errno: errno)
            }
            if count == 0 { break }
            digest.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            offset += off_t(count)
        }
        return digest.hexDigest()
    }
}
