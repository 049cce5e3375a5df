import CResumable
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where a ``SHA256Hasher`` computes its digest.
enum SHA256Backend: String, Sendable, CustomStringConvertible {
    /// The system's libcrypto (OpenSSL 3 or 1.1), loaded at run time: SHA-NI or AVX2 code where the CPU has it.
    case libcrypto
    /// The package's own C code (`sha256.c`): about 300 MB/s, everywhere.
    case portable

    /// The backend a new ``SHA256Hasher`` uses by default: libcrypto when it loaded, else the portable code.
    static var fastest: SHA256Backend {
        cresumable_sha256_libcrypto_available() != 0 ? .libcrypto : .portable
    }

    var description: String { rawValue }
}

/// An incremental SHA-256 (FIPS 180-4) through the fastest code at hand: the system's libcrypto, loaded at run time
/// (never linked), or the package's portable C code where libcrypto is missing or incomplete.
///
/// Noncopyable: the libcrypto context it owns is freed when the value goes away, and a digest is finalized once. A
/// value may move to another thread (it owns its state alone) but must not be used by two at once.
struct SHA256Hasher: ~Copyable, @unchecked Sendable {
    // @unchecked: the C context is owned by this one value (it cannot be copied), so sending it is safe.
    private var context = cresumable_sha256_hasher()

    /// Size of the buffer that file hashing reads into: large enough to make a read's cost vanish against the
    /// hashing, small enough to stay in the CPU's cache between the read and the hashing.
    static let readChunk = 256 << 10

    /// A fresh digest; with `portableOnly` always in the portable code (for tests and comparisons).
    init(portableOnly: Bool = false) {
        cresumable_sha256_hasher_init(&context, portableOnly ? 1 : 0)
    }

    deinit {
        var context = self.context
        cresumable_sha256_hasher_destroy(&context)
    }

    /// Where this digest is computed.
    var backend: SHA256Backend {
        context.evp != nil ? .libcrypto : .portable
    }

    /// Adds `bytes` to the digest.
    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        cresumable_sha256_hasher_update(&context, base, bytes.count)
    }

    /// Adds `bytes` to the digest.
    mutating func update(_ bytes: some ContiguousBytes) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// The digest of everything added, as 64 lowercase hexadecimal digits.
    ///
    /// Throws ``ResumableError/Code/fileSystem`` only when libcrypto reported an error (which its SHA-256 does not do
    /// in practice); never traps.
    consuming func finalize() throws(ResumableError) -> String {
        var digest = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        let result = withUnsafeMutableBytes(of: &digest) { bytes in
            cresumable_sha256_hasher_final(&context, bytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        guard result == 0 else {
            throw ResumableError(.fileSystem, "computing a SHA-256 failed: libcrypto reported an error")
        }
        return withUnsafeBytes(of: &digest) { Self.hex($0) }
    }

    /// `bytes` as lowercase hexadecimal digits.
    static func hex(_ bytes: UnsafeRawBufferPointer) -> String {
        let digits = Array("0123456789abcdef".utf8)
        return String(unsafeUninitializedCapacity: bytes.count * 2) { text in
            for (index, byte) in bytes.enumerated() {
                text[2 * index] = digits[Int(byte >> 4)]
                text[2 * index + 1] = digits[Int(byte & 0x0f)]
            }
            return bytes.count * 2
        }
    }

    /// The lowercase hex SHA-256 of `bytes`.
    static func hex(of bytes: some ContiguousBytes, portableOnly: Bool = false) throws(ResumableError) -> String {
        var hasher = SHA256Hasher(portableOnly: portableOnly)
        hasher.update(bytes)
        return try hasher.finalize()
    }

    /// The lowercase hex SHA-256 of everything `descriptor` holds from byte 0 (read with `pread`; the file position
    /// is not used). `path` names the file in errors.
    static func hex(
        ofDescriptor descriptor: Int32, path: String, portableOnly: Bool = false
    ) throws(ResumableError) -> String {
        var hasher = SHA256Hasher(portableOnly: portableOnly)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: readChunk, alignment: 64)
        defer { buffer.deallocate() }
        var offset: off_t = 0
        while true {
            let count = pread(descriptor, buffer.baseAddress, buffer.count, offset)
            if count < 0 {
                if errno == EINTR { continue }
                throw .fileSystem("reading", path: path, errno: errno)
            }
            if count == 0 { break }
            hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            offset += off_t(count)
        }
        do throws(ResumableError) {
            return try hasher.finalize()
        } catch {
            throw ResumableError(.fileSystem, "hashing '\(path)' failed: \(error.message)")
        }
    }

    /// The lowercase hex SHA-256 of the file at `path`.
    static func hex(ofFileAt path: String, portableOnly: Bool = false) throws(ResumableError) -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .fileSystem("opening", path: path, errno: errno) }
        defer { close(descriptor) }
        return try hex(ofDescriptor: descriptor, path: path, portableOnly: portableOnly)
    }
}
