/// Gzip framing around stored (uncompressed) deflate blocks: a valid gzip stream without a compressor.
enum GzipFraming {
    /// The largest payload of one stored deflate block.
    static let maxBlockLength: Int64 = 65_535

    /// The 10-byte gzip member header: magic, CM=8 (deflate), no flags, MTIME 0, XFL 0, OS 255 (unknown).
    static let header: [UInt8] = [0x1F, 0x8B, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xFF]

    /// The number of stored blocks used for `length` content bytes (at least one, possibly empty).
    static func blockCount(for length: Int64) -> Int64 {
        max(1, (length + maxBlockLength - 1) / maxBlockLength)
    }

    /// The total size of the gzip stream for `length` content bytes.
    static func encodedLength(for length: Int64) -> Int64 {
        Int64(header.count) + 5 * blockCount(for: length) + length + 8
    }

    /// The 5-byte header of a stored block of `length` bytes (`length` ≤ 65535).
    static func blockHeader(length: Int, isFinal: Bool) -> [UInt8] {
        let len = UInt16(truncatingIfNeeded: length)
        let nlen = ~len
        return [
            isFinal ? 0x01 : 0x00,
            UInt8(truncatingIfNeeded: len), UInt8(truncatingIfNeeded: len >> 8),
            UInt8(truncatingIfNeeded: nlen), UInt8(truncatingIfNeeded: nlen >> 8),
        ]
    }

    /// The 8-byte gzip trailer: CRC-32 and input size modulo 2^32, both little-endian.
    static func trailer(crc: UInt32, length: Int64) -> [UInt8] {
        let size = UInt32(truncatingIfNeeded: length)
        return [
            UInt8(truncatingIfNeeded: crc), UInt8(truncatingIfNeeded: crc >> 8),
            UInt8(truncatingIfNeeded: crc >> 16), UInt8(truncatingIfNeeded: crc >> 24),
            UInt8(truncatingIfNeeded: size), UInt8(truncatingIfNeeded: size >> 8),
            UInt8(truncatingIfNeeded: size >> 16), UInt8(truncatingIfNeeded: size >> 24),
        ]
    }

    /// Gzips `bytes` in memory (used for tests and small bodies).
    static func encode(_ bytes: [UInt8]) -> [UInt8] {
        var output = header
        let length = Int64(bytes.count)
        let blocks = blockCount(for: length)
        for block in 0..<blocks {
            let start = Int(block * maxBlockLength)
            let end = min(bytes.count, start + Int(maxBlockLength))
            output += blockHeader(length: end - start, isFinal: block == blocks - 1)
            output += bytes[start..<end]
        }
        output += trailer(crc: CRC32.checksum(bytes), length: length)
        return output
    }
}
