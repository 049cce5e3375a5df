/// One byte-range-spec from a `Range: bytes=…` header (RFC 9110 §14.1.1).
enum ByteRangeSpec: Equatable {
    /// `first-last`; `last` saturates at `Int64.max` when it overflows.
    case closed(first: Int64, last: Int64)
    /// `first-`.
    case open(first: Int64)
    /// `-length`: the last `length` bytes.
    case suffix(length: Int64)

    /// Parses a `Range` header value; `nil` when it is not a valid `bytes` ranges-specifier (then it is ignored).
    ///
    /// Numbers are parsed as 64-bit values with overflow checks; values that overflow saturate at `Int64.max`
    /// (a first byte that large is unsatisfiable, a last byte that large means "to the end").
    static func parse(_ value: String) -> [ByteRangeSpec]? {
        let bytes = Array(value.utf8)
        let unit = Array("bytes=".utf8)
        guard bytes.count > unit.count,
            zip(bytes, unit).allSatisfy({ lowercased($0) == $1 })
        else { return nil }
        var specs: [ByteRangeSpec] = []
        for element in bytes[unit.count...].split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
            let trimmed = trimOWS(element)
            if trimmed.isEmpty { continue }
            guard let spec = parseSpec(trimmed) else { return nil }
            specs.append(spec)
        }
        return specs.isEmpty ? nil : specs
    }

    /// The first byte of a `Range` value holding exactly one `first-last` or `first-` range; `nil` for no value,
    /// several ranges, a suffix range or an invalid value.
    static func singleStart(of value: String?) -> Int64? {
        guard let value, let specs = parse(value), specs.count == 1 else { return nil }
        switch specs[0] {
        case .closed(let first, _), .open(let first): return first
        case .suffix: return nil
        }
    }

    /// The inclusive positions this spec selects in a representation of `length` bytes, or `nil` if unsatisfiable.
    func resolve(length: Int64) -> ClosedRange<Int64>? {
        guard length > 0 else { return nil }
        switch self {
        case .closed(let first, let last):
            guard first < length else { return nil }
            return first...min(last, length - 1)
        case .open(let first):
            guard first < length else { return nil }
            return first...(length - 1)
        case .suffix(let suffixLength):
            guard suffixLength > 0 else { return nil }
            return max(0, length - suffixLength)...(length - 1)
        }
    }

    private static func parseSpec(_ bytes: ArraySlice<UInt8>) -> ByteRangeSpec? {
        guard let dash = bytes.firstIndex(of: UInt8(ascii: "-")) else { return nil }
        let firstDigits = bytes[bytes.startIndex..<dash]
        let lastDigits = bytes[(dash + 1)...]
        if firstDigits.isEmpty {
            guard let length = parseNumber(lastDigits) else { return nil }
            return .suffix(length: length)
        }
        guard let first = parseNumber(firstDigits) else { return nil }
        if lastDigits.isEmpty { return .open(first: first) }
        guard let last = parseNumber(lastDigits), last >= first else { return nil }
        return .closed(first: first, last: last)
    }

    /// Parses 1*DIGIT as Int64, saturating at `Int64.max` on overflow; `nil` for any other character.
    static func parseNumber(_ digits: ArraySlice<UInt8>) -> Int64? {
        guard !digits.isEmpty else { return nil }
        var value: Int64 = 0
        var saturated = false
        for byte in digits {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            if saturated { continue }
            let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(Int64(byte - UInt8(ascii: "0")))
            if overflow1 || overflow2 {
                saturated = true
                value = Int64.max
            } else {
                value = sum
            }
        }
        return value
    }

    private static func lowercased(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte + 32 : byte
    }

    private static func trimOWS(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var slice = bytes
        while let first = slice.first, first == 0x20 || first == 0x09 { slice = slice.dropFirst() }
        while let last = slice.last, last == 0x20 || last == 0x09 { slice = slice.dropLast() }
        return slice
    }
}
