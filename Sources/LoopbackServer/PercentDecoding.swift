/// Strict percent-decoding of URL paths.
enum PercentDecoding {
    /// Decodes `%XX` escapes in `text`; returns `nil` for a malformed escape or a decoded NUL byte.
    static func decode(_ text: String) -> [UInt8]? {
        let input = Array(text.utf8)
        var output: [UInt8] = []
        output.reserveCapacity(input.count)
        var index = 0
        while index < input.count {
            let byte = input[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < input.count,
                    let high = hexValue(input[index + 1]),
                    let low = hexValue(input[index + 2])
                else { return nil }
                output.append(high << 4 | low)
                index += 3
            } else {
                output.append(byte)
                index += 1
            }
        }
        return output.contains(0) ? nil : output
    }

    /// Decodes `text` into a UTF-8 string, or `nil` when malformed or not valid UTF-8.
    static func decodeString(_ text: String) -> String? {
        guard let bytes = decode(text) else { return nil }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
