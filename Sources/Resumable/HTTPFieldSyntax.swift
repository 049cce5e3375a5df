/// Request headers that carry credentials: never stored in a token, never sent to another origin.
///
/// The rule, on the lowercased name: a header is sensitive when its name contains one of ``fragments``
/// (`auth`, `cookie`, `credential`, `csrf`, `jwt`, `key`, `passphrase`, `passwd`, `password`, `secret`,
/// `session`, `signature`, `token`, `xsrf`), is one of ``names`` (`dpop`), or is one of the extra names a
/// configuration adds (``DownloadTask/Configuration/sensitiveHeaderNames``, compared case-insensitively).
///
/// The fragments err on the side of caution: `Authorization`, `Proxy-Authorization`, `Cookie`, `X-Api-Key`,
/// `X-Auth-Token`, `X-Amz-Security-Token`, `X-Goog-Api-Key`, `Ocp-Apim-Subscription-Key`, `X-CSRF-Token`,
/// `X-Session-Id` and `X-Amz-Server-Side-Encryption-Customer-Key` all match. A header wrongly taken for a
/// credential only costs a resume that no longer sends it; a credential taken for an ordinary header would be
/// written to disk and sent to whichever host a redirect names.
enum SensitiveHeaders {
    /// Substrings of a lowercased name that make it sensitive.
    static let fragments: [String] = [
        "auth", "cookie", "credential", "csrf", "jwt", "key", "passphrase", "passwd", "password", "secret",
        "session", "signature", "token", "xsrf",
    ]
    /// Lowercased names that are sensitive although they contain no fragment.
    static let names: Set<String> = ["dpop"]

    /// Whether `name` is a credential header by the default rule.
    static func contains(_ name: String) -> Bool {
        let lowercased = name.lowercased()
        return names.contains(lowercased) || fragments.contains { lowercased.contains($0) }
    }

    /// Whether `name` is a credential header by the default rule or is one of `extra` (case-insensitive).
    static func contains(_ name: String, extra: Set<String>) -> Bool {
        if contains(name) { return true }
        guard !extra.isEmpty else { return false }
        let lowercased = name.lowercased()
        return extra.contains { $0.lowercased() == lowercased }
    }
}

/// The syntax of header names and values (RFC 9110 §5.1, §5.5).
package enum HTTPFieldSyntax {
    /// Whether `name` is a token: visible ASCII without delimiters.
    package static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.allSatisfy(HTTPSyntax.isTokenCharacter)
    }

    /// Whether `value` can be sent as a header value: no CR, LF, NUL or other control characters but tab.
    package static func isValidValue(_ value: String) -> Bool {
        value.utf8.allSatisfy { $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }
    }

    /// The longest value of a server's header that a token keeps (a validator, `Date`, `Accept-Ranges`), in bytes: 1
    /// KiB, far beyond any real one. A longer value is not kept (a validator that long is none): a token, and a task
    /// record that holds one, must stay far below the 1 MiB their readers accept, whatever a server sends.
    package static let maximumStoredValueLength = 1024

    /// Whether a server's header value may be kept in a token: ``isValidValue(_:)`` and at most
    /// ``maximumStoredValueLength`` bytes.
    package static func isStorableValue(_ value: String) -> Bool {
        value.utf8.count <= maximumStoredValueLength && isValidValue(value)
    }
}
