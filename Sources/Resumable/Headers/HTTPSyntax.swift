/// Character classes and number parsing shared by the header parsers (RFC 9110 §5.6).
///
/// Everything works on UTF-8 bytes: the HTTP grammar is defined over octets, and every delimiter the parsers
/// split on is ASCII, so slicing a UTF-8 buffer at those delimiters never splits a multi-byte character.
enum HTTPSyntax {
    /// Whether `byte` is optional whitespace: SP or HTAB (RFC 9110 §5.6.3).
    static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t")
    }

    /// Whether `byte` is an ASCII decimal digit (RFC 5234 §B.1 `DIGIT`).
    static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    /// Whether `byte` is an ASCII letter (RFC 5234 §B.1 `ALPHA`).
    static func isAlpha(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
            || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
    }

    /// Whether `byte` may appear in a token (RFC 9110 §5.6.2 `tchar`).
    static func isTokenCharacter(_ byte: UInt8) -> Bool {
        if isAlpha(byte) || isDigit(byte) { return true }
        switch byte {
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
            UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
            UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }

    /// The ASCII lowercase form of `byte`; other bytes are returned unchanged.
    static func lowercased(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte + 0x20 : byte
    }

    /// `bytes` decoded as UTF-8 with ASCII letters lowercased (case-insensitive tokens, RFC 9110 §5.6.2).
    static func lowercasedString<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> String {
        String(decoding: bytes.map(lowercased), as: UTF8.self)
    }

    /// Whether `bytes` equals the ASCII string `lowercaseASCII`, ignoring ASCII case.
    static func equalsIgnoringCase<Bytes: Collection<UInt8>>(_ bytes: Bytes, _ lowercaseASCII: String) -> Bool {
        bytes.lazy.map(lowercased).elementsEqual(lowercaseASCII.utf8)
    }

    /// `bytes` without leading and trailing optional whitespace (RFC 9110 §5.5: field values exclude OWS).
    static func trimmingWhitespace(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        guard let first = bytes.firstIndex(where: { !isWhitespace($0) }),
            let last = bytes.lastIndex(where: { !isWhitespace($0) })
        else { return bytes[bytes.endIndex..<bytes.endIndex] }
        return bytes[first...last]
    }

    /// The UTF-8 bytes of `string` without leading and trailing optional whitespace.
    static func trimmedBytes(_ string: String) -> ArraySlice<UInt8> {
        trimmingWhitespace(Array(string.utf8)[...])
    }

    /// The length that the values of every `Content-Length` field of a response declare together, or `nil` when
    /// they declare none that can be trusted.
    ///
    /// A sender may repeat the field, or a proxy or client library may merge the repeats into one list (URLSession
    /// reports `Content-Length: 100` sent twice as `100, 100`): RFC 9110 §8.6 lets a recipient take a list of
    /// identical values as that one value, and RFC 9112 §6.3 makes any other such list an unrecoverable framing
    /// error. So every comma-separated member of every field, without the whitespace around it, must be the same
    /// valid decimal (``parseDigits(_:)``); an empty member, a malformed one, or two numbers that differ (`100`
    /// and `101`, also in separate fields) give `nil`, as does an empty `fields`.
    static func contentLength(_ fields: [String]) -> Int64? {
        var agreed: Int64?
        for field in fields {
            for member in Array(field.utf8).split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
                guard let value = parseDigits(trimmingWhitespace(member)) else { return nil }
                guard agreed == nil || agreed == value else { return nil }
                agreed = value
            }
        }
        return agreed
    }

    /// Parses `1*DIGIT` as a non-negative `Int64`.
    ///
    /// Returns nil for an empty sequence, any byte that is not an ASCII digit (so no sign, no spaces, no
    /// separators) and any value that does not fit in `Int64`. Leading zeros are allowed, as the ABNF allows them.
    static func parseDigits<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> Int64? {
        guard !bytes.isEmpty else { return nil }
        var value: Int64 = 0
        for byte in bytes {
            guard isDigit(byte) else { return nil }
            let (multiplied, multiplyOverflow) = value.multipliedReportingOverflow(by: 10)
            let (added, addOverflow) = multiplied.addingReportingOverflow(Int64(byte - UInt8(ascii: "0")))
            guard !multiplyOverflow, !addOverflow else { return nil }
            value = added
        }
        return value
    }
}
