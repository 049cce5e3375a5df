/// Deterministic pseudo-random content computed per position, so huge bodies need no storage.
///
/// Byte `offset` is byte `offset % 8` (little-endian) of the 64-bit word `splitmix64(seed, offset / 8)`.
enum GeneratedContent {
    /// The 64-bit word covering bytes `8 * index ..< 8 * index + 8`.
    @inline(__always)
    static func word(seed: UInt64, index: UInt64) -> UInt64 {
        var z = seed &+ (index &+ 1) &* 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// The byte at `offset`.
    static func byte(seed: UInt64, offset: Int64) -> UInt8 {
        let value = word(seed: seed, index: UInt64(offset) / 8)
        return UInt8(truncatingIfNeeded: value >> (8 * (UInt64(offset) % 8)))
    }

    /// Fills `buffer` with the bytes starting at `start` (the buffer's whole count is written).
    static func fill(_ buffer: UnsafeMutableRawBufferPointer, seed: UInt64, start: Int64) {
        let count = buffer.count
        guard count > 0, let base = buffer.baseAddress else { return }
        var offset = UInt64(start)
        var written = 0
        // Leading bytes up to the next word boundary.
        while written < count && offset % 8 != 0 {
            base.storeBytes(
                of: UInt8(truncatingIfNeeded: word(seed: seed, index: offset / 8) >> (8 * (offset % 8))),
                toByteOffset: written,
                as: UInt8.self
            )
            written += 1
            offset += 1
        }
        // Whole words.
        var index = offset / 8
        while count - written >= 8 {
            base.storeBytes(of: word(seed: seed, index: index).littleEndian, toByteOffset: written, as: UInt64.self)
            written += 8
            index += 1
        }
        // Trailing bytes.
        if written < count {
            let last = word(seed: seed, index: index)
            var shift: UInt64 = 0
            while written < count {
                base.storeBytes(of: UInt8(truncatingIfNeeded: last >> shift), toByteOffset: written, as: UInt8.self)
                written += 1
                shift += 8
            }
        }
    }
}
