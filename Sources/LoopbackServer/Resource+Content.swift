import Foundation

extension Resource {
    /// The content length in bytes (for files: the current size, 0 when unreadable).
    public var length: Int64 {
        switch body {
        case .bytes(let bytes): Int64(bytes.count)
        case .generated(let length, _): max(0, length)
        case .file(let url): FileInfo.of(path: url.path)?.size ?? 0
        }
    }

    /// The content byte at `offset`; 0 when `offset` is outside the content.
    ///
    /// - Parameter offset: A position in `0..<length`.
    /// - Returns: The byte.
    public func byte(at offset: Int64) -> UInt8 {
        switch body {
        case .bytes(let bytes):
            guard offset >= 0, offset < Int64(bytes.count) else { return 0 }
            return bytes[Int(offset)]
        case .generated(let length, let seed):
            guard offset >= 0, offset < length else { return 0 }
            return GeneratedContent.byte(seed: seed, offset: offset)
        case .file:
            return contentBytes(in: offset..<offset + 1).first ?? 0
        }
    }

    /// The whole content (for small resources).
    ///
    /// - Returns: All content bytes.
    public func contentBytes() -> [UInt8] {
        if case .bytes(let bytes) = body { return bytes }
        return contentBytes(in: 0..<length)
    }

    /// The content bytes in `range`, clamped to the content.
    ///
    /// - Parameter range: The byte positions wanted.
    /// - Returns: The bytes (fewer when the range extends past the end).
    public func contentBytes(in range: Range<Int64>) -> [UInt8] {
        ContentSource(body: body)?.bytes(in: range) ?? []
    }

    /// The generated content for `seed` over `range`, exactly as a `.generated(length:seed:)` body serves it.
    ///
    /// - Parameters:
    ///   - seed: The content seed.
    ///   - range: The byte positions wanted (non-negative).
    /// - Returns: The bytes.
    public static func generatedBytes(seed: UInt64, range: Range<Int64>) -> [UInt8] {
        guard range.lowerBound >= 0, !range.isEmpty else { return [] }
        var output = [UInt8](repeating: 0, count: Int(range.count))
        output.withUnsafeMutableBytes { GeneratedContent.fill($0, seed: seed, start: range.lowerBound) }
        return output
    }

    /// The generated content byte for `seed` at `offset`.
    ///
    /// - Parameters:
    ///   - seed: The content seed.
    ///   - offset: The byte position (non-negative).
    /// - Returns: The byte.
    public static func generatedByte(seed: UInt64, offset: Int64) -> UInt8 {
        GeneratedContent.byte(seed: seed, offset: max(0, offset))
    }
}
