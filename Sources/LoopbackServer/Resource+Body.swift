import Foundation

extension Resource {
    /// Where a resource's bytes come from.
    public enum Body: Sendable, Hashable {
        /// Bytes held in memory.
        case bytes([UInt8])
        /// Deterministic content of `length` bytes computed per position from `seed`; never allocated.
        case generated(length: Int64, seed: UInt64)
        /// A file read with `pread` in chunks at response time; its current size is served.
        case file(URL)
    }
}

extension Resource.Body {
    /// The strong ETag derived from the content.
    var defaultETag: String? {
        switch self {
        case .bytes(let bytes):
            // FNV-1a over the bytes, through a raw pointer: tests register megabytes, and a debug build's
            // iterator would spend a noticeable share of the (shared) test time here.
            let hash = bytes.withUnsafeBufferPointer { buffer -> UInt64 in
                var hash: UInt64 = 0xCBF2_9CE4_8422_2325
                guard let base = buffer.baseAddress else { return hash }
                var index = 0
                while index < buffer.count {
                    hash = (hash ^ UInt64(base[index])) &* 0x0000_0100_0000_01B3
                    index &+= 1
                }
                return hash
            }
            return "\"\(String(hash, radix: 16))-\(String(bytes.count, radix: 16))\""
        case .generated(let length, let seed):
            return "\"g\(String(seed, radix: 16))-\(String(UInt64(bitPattern: length), radix: 16))\""
        case .file(let url):
            return FileInfo.of(path: url.path).map(\.etag)
        }
    }

    /// The default Last-Modified: the file's modification time, or for in-memory and generated content a
    /// date in 2020–2023 derived from the content, so the same content always carries the same date (and
    /// re-registering it does not look like a change) while other content carries another.
    var defaultLastModified: String? {
        defaultLastModified(etag: defaultETag)
    }

    /// ``defaultLastModified`` given this body's ``defaultETag``, so the content is not hashed twice.
    func defaultLastModified(etag defaultETag: String?) -> String? {
        if case .file(let url) = self, let info = FileInfo.of(path: url.path) {
            return info.lastModified
        }
        var hash: UInt64 = 0
        for byte in (defaultETag ?? "").utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
        }
        let start: Int64 = 1_577_836_800  // 2020-01-01T00:00:00Z
        return HTTPDate.format(secondsSince1970: start + Int64(hash % 100_000_000))
    }
}
