/// An entity tag as received (RFC 9110 §8.8.3), kept byte for byte.
///
/// Grammar: `entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE` with `etagc = %x21 / %x23-7E / obs-text`. The weak
/// indicator is case-sensitive (`%s"W/"`), so `w/"x"` is rejected. Leading and trailing OWS are trimmed before
/// parsing; `rawValue` is the trimmed field value, unchanged otherwise, so it can be echoed in `If-Range` or
/// `If-Match` exactly as the server sent it. Lists (`"a", "b"`), unquoted tags, embedded quotes and whitespace
/// or control characters inside the quotes are rejected. The empty tag `""` is valid.
struct EntityTag: Hashable, Sendable {
    /// The tag exactly as received (after trimming OWS), e.g. `W/"abc"`.
    let rawValue: String
    /// Whether the tag carries the `W/` weak indicator.
    let isWeak: Bool
    /// The opaque tag without the weak indicator and the surrounding quotes.
    let opaqueTag: String

    /// Parses an ETag field value; returns nil when it is not exactly one entity tag.
    init?(_ headerValue: String) {
        let bytes = HTTPSyntax.trimmedBytes(headerValue)
        var tag = bytes
        let weak = tag.starts(with: "W/".utf8)
        if weak { tag = tag.dropFirst(2) }
        guard tag.count >= 2, tag.first == UInt8(ascii: "\""), tag.last == UInt8(ascii: "\"") else { return nil }
        let opaque = tag.dropFirst().dropLast()
        guard opaque.allSatisfy(Self.isEntityTagCharacter) else { return nil }
        rawValue = String(decoding: bytes, as: UTF8.self)
        isWeak = weak
        opaqueTag = String(decoding: opaque, as: UTF8.self)
    }

    /// Strong comparison (§8.8.3.2): both strong and identical.
    ///
    /// This is the comparison `If-Range` requires before a server may send a partial response, so a client
    /// should only resume against a strong validator.
    func strongMatches(_ other: EntityTag) -> Bool {
        !isWeak && !other.isWeak && opaqueTag == other.opaqueTag
    }

    /// Weak comparison (§8.8.3.2): the opaque tags are identical, whatever their weakness.
    func weakMatches(_ other: EntityTag) -> Bool {
        opaqueTag == other.opaqueTag
    }

    /// Whether `byte` is an `etagc`: `%x21 / %x23-7E / obs-text` (any byte of a non-ASCII UTF-8 character).
    private static func isEntityTagCharacter(_ byte: UInt8) -> Bool {
        byte == 0x21 || (byte >= 0x23 && byte <= 0x7E) || byte >= 0x80
    }
}
