import Foundation
import LoopbackServer
import ProcessSpawning
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Both SHA-256 backends: libcrypto (loaded at run time) and the portable C code.
@Suite("SHA-256 hasher")
struct SHA256HasherTests {
    /// Runs each test on the portable code and on the default (libcrypto where it loads).
    static let backends: [Bool] = [false, true]

    /// `count` bytes of a fixed pattern, `(7 i + 3) mod 251`: the vectors below come from Python's `hashlib`.
    static func pattern(_ count: Int) -> [UInt8] {
        (0..<count).map { UInt8((7 * $0 + 3) % 251) }
    }

    /// Sizes around the 64-byte block and the 56-byte padding boundary, with their digests (Python `hashlib`).
    static let patternVectors: [(Int, String)] = [
        (0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        (1, "084fed08b978af4d7d196a7446a86b58009e636b611db16211b65a9aadff29c5"),
        (55, "1deace58c745f3ecadde68a5923f494c3703fa73f0306483ccb898a5826e8d70"),
        (56, "06dbe23685750e4d3881ded95047abaf93fa8f9c5d3501dc57c717a72ff1398e"),
        (57, "011f4bced20a249afb834d24b3e4eca31ad5ea2bdd1d8a1a564c2d2410398e69"),
        (63, "47fb38b12335c9298d09280515c0666489a189d1554bb0ac1a0740806ce9d8b6"),
        (64, "dfa798724b1a8014994f363e5da7474ed26ce3757fb29e07aa47ad5a9352d37b"),
        (65, "dd2eab5a5507d7717c63ce953d9ac61752c21e664425ad1227054722a0d97f69"),
        (119, "c6e0f435df5d7d265baacca31e0602c00aa22fa6d3819aed664649294c743756"),
        (120, "17eb8960823a644bde3065620bb9d45931fe8993fd8eb692a17aff0fd725db6a"),
        (121, "8a9e7f672f828772a23530c5acca713a2a3ebae8a20e423fa0ee9ba59af9694a"),
        (127, "2409a159329f4e770a7d8128130497abb1de01ffb6ad389d97d89ebbeeb7f02c"),
        (128, "3a9c1e22e20578eebe442238f431befd688bd56698eb7c77d95d3f97d8f58207"),
        (129, "956f5da998f608be52587f28902b608909b661f99a1b300e3d3046b4f69f6fb5"),
        (1000, "a9425c416f534025a4e2422bd14adba4ec3d4a68d10c3329be8df612964d2b6e"),
        (1 << 20, "1ac437f476c488acba4000af7ae89ef53f7ffbeef2e937850985f5ceb8b5ae6f"),
    ]

    @Test("The backend is libcrypto exactly when libcrypto can be loaded here; portableOnly forces the C code")
    func backendChoice() {
        let loadable = ["libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so"].contains { name in
            guard let handle = dlopen(name, RTLD_NOW | RTLD_LOCAL) else { return false }
            defer { dlclose(handle) }
            return dlsym(handle, "EVP_DigestUpdate") != nil
        }
        #expect(SHA256Backend.fastest == (loadable ? .libcrypto : .portable))
        #expect(SHA256Hasher().backend == SHA256Backend.fastest)
        #expect(SHA256Hasher(portableOnly: true).backend == .portable)
    }

    @Test("FIPS 180-4 vectors: empty, \"abc\", the two-block message, a million 'a'", arguments: backends)
    func standardVectors(portableOnly: Bool) throws {
        #expect(
            try SHA256Hasher.hex(of: [UInt8](), portableOnly: portableOnly)
                == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(
            try SHA256Hasher.hex(of: Array("abc".utf8), portableOnly: portableOnly)
                == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(
            try SHA256Hasher.hex(
                of: Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8), portableOnly: portableOnly)
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        // A million 'a', fed in pieces of 1000 like the standard's test does.
        var hasher = SHA256Hasher(portableOnly: portableOnly)
        let thousand = [UInt8](repeating: 0x61, count: 1000)
        for _ in 0..<1000 { hasher.update(thousand) }
        #expect(try hasher.finalize() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    @Test(
        "Sizes around the 64-byte block boundaries and 1 MiB of a pattern, whole and byte by byte", arguments: backends)
    func blockBoundaries(portableOnly: Bool) throws {
        for (count, expected) in Self.patternVectors {
            let bytes = Self.pattern(count)
            #expect(try SHA256Hasher.hex(of: bytes, portableOnly: portableOnly) == expected, "\(count) bytes")
            guard count <= 1000 else { continue }
            var hasher = SHA256Hasher(portableOnly: portableOnly)
            for byte in bytes { hasher.update([byte]) }
            #expect(try hasher.finalize() == expected, "\(count) bytes, one at a time")
        }
    }

    @Test("Both backends and PortableSHA256 agree on random data cut into random pieces")
    func backendsAgree() throws {
        var random = SplitMix64(seed: 0x5EED_0256)
        for round in 0..<40 {
            let count = round < 20 ? Int(random.next() % 300) : Int(random.next() % (3 << 20))
            let bytes = (0..<(count + 7) / 8).flatMap { _ in withUnsafeBytes(of: random.next()) { Array($0) } }
            let data = Array(bytes.prefix(count))
            var fast = SHA256Hasher()
            var portable = SHA256Hasher(portableOnly: true)
            var value = PortableSHA256()
            var start = 0
            while start < data.count {
                let piece = Int(random.next() % (round.isMultiple(of: 2) ? 97 : 200_000)) + 1
                let end = min(start + piece, data.count)
                data[start..<end].withUnsafeBytes { piece in
                    fast.update(piece)
                    portable.update(piece)
                    value.update(piece)
                }
                start = end
            }
            let fastDigest = try fast.finalize()
            #expect(fastDigest == (try portable.finalize()), "\(count) bytes")
            #expect(fastDigest == value.hexDigest(), "\(count) bytes")
            #expect(fastDigest == (try SHA256Hasher.hex(of: data, portableOnly: true)), "\(count) bytes")
        }
    }

    @Test("openssl dgst -sha256 agrees on a file, for both backends and PartialFile.sha256()")
    func agreesWithOpenSSL() async throws {
        let directory = try TemporaryDirectory()
        let path = directory.url.appendingPathComponent("data.bin").path
        // Over three read chunks, not a multiple of 64.
        let content = testBytes(count: 3 * SHA256Hasher.readChunk + 12_345, seed: 42)
        try Data(content).write(to: URL(fileURLWithPath: path))
        let output = try await onOwnThread { () throws -> String in
            let (termination, data) = try SpawnedProcess.run(
                executable: URL(fileURLWithPath: "/usr/bin/env"), arguments: ["openssl", "dgst", "-sha256", "-r", path])
            guard termination == .exited(0) else { return "openssl failed: \(termination)" }
            return String(decoding: data, as: UTF8.self)
        }
        let expected = String(output.prefix(64))
        #expect(SHA256Digest.normalized(expected) == expected, "openssl said: \(output)")
        #expect(try SHA256Hasher.hex(ofFileAt: path) == expected)
        #expect(try SHA256Hasher.hex(ofFileAt: path, portableOnly: true) == expected)
        #expect(try PortableSHA256.hex(ofFileAt: URL(fileURLWithPath: path)) == expected)
        let file = try PartialFile.create(in: directory.path)
        defer {
            file.remove()
            file.release()
        }
        try content.withUnsafeBytes { try file.write($0, at: 0) }
        #expect(try file.sha256() == expected)
    }

    @Test("A missing file is a typed file-system error")
    func missingFile() {
        #expect {
            try SHA256Hasher.hex(ofFileAt: "/nonexistent-\(UUID().uuidString)")
        } throws: { error in
            (error as? ResumableError)?.code == .fileSystem
        }
    }
}
