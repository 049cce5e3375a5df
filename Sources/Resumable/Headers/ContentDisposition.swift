/// The filename parameters of a Content-Disposition header (RFC 6266, RFC 8187).
///
/// Grammar (RFC 6266 §4.1): `disposition-type *( OWS ";" OWS disposition-parm )`, where a parameter is
/// `token BWS "=" BWS ( token / quoted-string )` or, for `filename*`, an RFC 8187 `ext-value`. Parsing rules:
/// - the disposition type and the parameter names are case-insensitive and reported lowercased;
/// - quoted strings honour backslash escapes (RFC 9110 §5.6.4), so `;` and `\"` inside them are data;
/// - an unquoted value is read leniently up to the next `;` and trimmed, as browsers do, because servers often
///   send `filename=my file.txt`; it is not percent-decoded;
/// - empty parameters (`;;`, a trailing `;`) are ignored;
/// - a parameter name given twice makes the whole header invalid (RFC 6266 §4.1: such values "are invalid"),
///   so a download falls back to the URL instead of guessing which of two names the server meant;
/// - a structural error (missing type, a parameter without `=`, an unterminated quoted string, text after a
///   quoted string) makes the whole header invalid;
/// - `filename*` must be an unquoted `charset "'" [ language ] "'" value-chars` with charset UTF-8 or ISO-8859-1
///   (case-insensitive); any other charset, a bad percent escape, a character outside `attr-char`, or bytes that
///   are not valid in the charset make only `extendedFilename` nil (RFC 6266 §4.3 falls back to `filename`).
///
/// Decoded names are returned raw and may contain `/`, `..`, NUL or control characters; `SuggestedFilename`
/// sanitizes them.
struct ContentDisposition: Hashable, Sendable {
    /// The disposition type, lowercased: `attachment`, `inline`, or an extension type.
    let type: String
    /// The `filename` parameter: a quoted string unescaped, or the unquoted value as sent.
    let filename: String?
    /// The decoded `filename*` parameter (RFC 8187), or nil when absent or not decodable.
    let extendedFilename: String?

    /// Parses a Content-Disposition field value; returns nil only when the header is unparseable as a whole.
    init?(_ headerValue: String) {
        guard let (type, parameters) = Self.parse(Array(headerValue.utf8)) else { return nil }
        self.type = type
        filename = parameters["filename"]?.text
        if case .token(let value)? = parameters["filename*"] {
            extendedFilename = Self.decodeExtendedValue(Array(value.utf8))
        } else {
            extendedFilename = nil
        }
    }

    /// `extendedFilename` when present and decodable, else `filename`.
    ///
    /// RFC 6266 §4.3: a recipient that understands `filename*` prefers it over `filename`. An empty decoded
    /// `filename*` is treated as absent.
    var preferredFilename: String? {
        if let extendedFilename, !extendedFilename.isEmpty { return extendedFilename }
        return filename
    }

    // MARK: - Parsing

    /// A parameter value as written: unquoted, or a quoted string already unescaped.
    private enum ParameterValue {
        case token(String)
        case quoted(String)

        /// The value's text, whichever way it was written.
        var text: String {
            switch self {
            case .token(let text), .quoted(let text): text
            }
        }
    }

    /// Splits the header into its lowercased type and its parameters keyed by lowercased name.
    private static func parse(_ bytes: [UInt8]) -> (String, [String: ParameterValue])? {
        var index = 0
        func skipWhitespace() {
            while index < bytes.count, HTTPSyntax.isWhitespace(bytes[index]) { index += 1 }
        }
        func readToken() -> ArraySlice<UInt8>? {
            let start = index
            while index < bytes.count, HTTPSyntax.isTokenCharacter(bytes[index]) { index += 1 }
            return index > start ? bytes[start..<index] : nil
        }

        skipWhitespace()
        guard let typeToken = readToken() else { return nil }
        var parameters: [String: ParameterValue] = [:]
        while true {
            skipWhitespace()
            guard index < bytes.count else { break }
            guard bytes[index] == UInt8(ascii: ";") else { return nil }
            index += 1
            skipWhitespace()
            guard index < bytes.count, bytes[index] != UInt8(ascii: ";") else { continue }

            guard let nameToken = readToken() else { return nil }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "=") else { return nil }
            index += 1
            skipWhitespace()

            let value: ParameterValue
            if index < bytes.count, bytes[index] == UInt8(ascii: "\"") {
                guard let (unescaped, end) = readQuotedString(bytes, from: index) else { return nil }
                index = end
                value = .quoted(String(decoding: unescaped, as: UTF8.self))
            } else {
                let start = index
                while index < bytes.count, bytes[index] != UInt8(ascii: ";") { index += 1 }
                let raw = HTTPSyntax.trimmingWhitespace(bytes[start..<index])
                guard !raw.isEmpty else { return nil }
                value = .token(String(decoding: raw, as: UTF8.self))
            }

            let name = HTTPSyntax.lowercasedString(nameToken)
            guard parameters[name] == nil else { return nil }
            parameters[name] = value
        }
        return (HTTPSyntax.lowercasedString(typeToken), parameters)
    }

    /// Reads a quoted string starting at the opening quote; returns its unescaped bytes and the index after it.
    private static func readQuotedString(_ bytes: [UInt8], from start: Int) -> ([UInt8], Int)? {
        var index = start + 1
        var result: [UInt8] = []
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                return (result, index + 1)
            } else if byte == UInt8(ascii: "\\") {
                guard index + 1 < bytes.count else { return nil }
                result.append(bytes[index + 1])
                index += 2
            } else {
                result.append(byte)
                index += 1
            }
        }
        return nil
    }

    /// Decodes an RFC 8187 `ext-value`: `charset "'" [ language ] "'" value-chars`.
    private static func decodeExtendedValue(_ bytes: [UInt8]) -> String? {
        let parts = bytes.split(separator: UInt8(ascii: "'"), maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        let charset = HTTPSyntax.lowercasedString(parts[0])
        guard parts[1].allSatisfy({ HTTPSyntax.isAlpha($0) || HTTPSyntax.isDigit($0) || $0 == UInt8(ascii: "-") }),
            let decoded = percentDecode(parts[2])
        else { return nil }
        switch charset {
        case "utf-8":
            return String(validating: decoded, as: UTF8.self)
        case "iso-8859-1":
            var result = ""
            result.unicodeScalars.append(contentsOf: decoded.map { Unicode.Scalar($0) })
            return result
        default:
            return nil
        }
    }

    /// Decodes `value-chars = *( pct-encoded / attr-char )`; nil on any other byte or a malformed escape.
    private static func percentDecode(_ bytes: ArraySlice<UInt8>) -> [UInt8]? {
        var result: [UInt8] = []
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.endIndex,
                    let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
                else { return nil }
                result.append(high << 4 | low)
                index += 3
            } else if isAttributeCharacter(byte) {
                result.append(byte)
                index += 1
            } else {
                return nil
            }
        }
        return result
    }

    /// Whether `byte` is an RFC 8187 `attr-char`.
    private static func isAttributeCharacter(_ byte: UInt8) -> Bool {
        if HTTPSyntax.isAlpha(byte) || HTTPSyntax.isDigit(byte) { return true }
        return "!#$&+-.^_`|~".utf8.contains(byte)
    }

    /// The value of an ASCII hexadecimal digit.
    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
