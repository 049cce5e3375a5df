import Foundation

/// Request headers that carry credentials: never stored in a token, never sent to another origin.
enum SensitiveHeaders {
    static let names: Set<String> = ["authorization", "cookie", "proxy-authorization"]

    static func contains(_ name: String) -> Bool {
        names.contains(name.lowercased())
    }
}

/// The syntax of header names and values (RFC 9110 §5.1, §5.5).
enum HTTPFieldSyntax {
    /// Whether `name` is a token: visible ASCII without delimiters.
    static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.allSatisfy(HTTPSyntax.isTokenCharacter)
    }

    /// Whether `value` can be sent as a header value: no CR, LF, NUL or other control characters but tab.
    static func isValidValue(_ value: String) -> Bool {
        value.utf8.allSatisfy { $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }
    }
}
