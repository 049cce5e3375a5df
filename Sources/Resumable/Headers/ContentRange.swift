/// A parsed Content-Range header (RFC 9110 §14.4).
///
/// The grammar accepted is
/// `range-unit SP ( incl-range "/" ( complete-length / "*" ) / "*/" complete-length )`, with these rules:
/// - leading and trailing OWS are trimmed (RFC 9110 §5.5); one or more SP/HTAB separate the unit from the range,
///   which tolerates senders that pad with an extra space, but no whitespace is accepted anywhere else;
/// - the unit must be `bytes`, compared case-insensitively (RFC 9110 §14.1);
/// - every number is `1*DIGIT` that fits in `Int64` (no sign, no empty number); larger values are malformed;
/// - `last-pos` must be at least `first-pos`, and a known complete length must exceed `last-pos` (§14.4: a
///   range whose last position is not less than the complete length is invalid);
/// - `last-pos` must be less than `Int64.max`, also when the complete length is unknown
///   (`bytes 0-9223372036854775807/*` is malformed), so a satisfied range always has
///   `0 <= first <= last < Int64.max` and `last + 1` and `last - first + 1` can never overflow;
/// - an unsatisfied range (`bytes */100`) requires a numeric complete length;
/// - lists, or anything else trailing the value, are rejected.
struct ContentRange: Hashable, Sendable {
    /// The range a response carries, or the complete length of an unsatisfiable request.
    enum Value: Hashable, Sendable {
        /// `bytes first-last/complete` or `bytes first-last/*` (complete length unknown).
        ///
        /// Always `0 <= first <= last < Int64.max`, and `completeLength > last` when known: `last + 1` and
        /// `last - first + 1` never overflow.
        case satisfied(first: Int64, last: Int64, completeLength: Int64?)
        /// `bytes */complete`, sent with 416 (Range Not Satisfiable).
        case unsatisfied(completeLength: Int64)
    }

    /// The parsed value.
    let value: Value

    /// Parses a Content-Range field value; returns nil when it is malformed in any way.
    init?(_ headerValue: String) {
        let bytes = HTTPSyntax.trimmedBytes(headerValue)
        guard let unitEnd = bytes.firstIndex(where: HTTPSyntax.isWhitespace),
            HTTPSyntax.equalsIgnoringCase(bytes[bytes.startIndex..<unitEnd], "bytes"),
            let rangeStart = bytes[unitEnd...].firstIndex(where: { !HTTPSyntax.isWhitespace($0) })
        else { return nil }
        let range = bytes[rangeStart...]

        if range.first == UInt8(ascii: "*") {
            let rest = range.dropFirst()
            guard rest.first == UInt8(ascii: "/"), let complete = HTTPSyntax.parseDigits(rest.dropFirst()) else {
                return nil
            }
            value = .unsatisfied(completeLength: complete)
            return
        }

        guard let dash = range.firstIndex(of: UInt8(ascii: "-")),
            let slash = range[dash...].firstIndex(of: UInt8(ascii: "/")),
            let first = HTTPSyntax.parseDigits(range[range.startIndex..<dash]),
            let last = HTTPSyntax.parseDigits(range[range.index(after: dash)..<slash]),
            last >= first,
            // `last + 1` (the end of the range, its length) must be an `Int64` too.
            last < Int64.max
        else { return nil }

        let completePart = range[range.index(after: slash)...]
        if completePart.elementsEqual("*".utf8) {
            value = .satisfied(first: first, last: last, completeLength: nil)
        } else if let complete = HTTPSyntax.parseDigits(completePart), complete > last {
            value = .satisfied(first: first, last: last, completeLength: complete)
        } else {
            return nil
        }
    }
}
