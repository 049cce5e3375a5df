import Foundation

extension HTTPURL {
    /// The range of the user information in an absolute URL string: everything from just after `://` up to and
    /// including the last `@` before the path, query or fragment; `nil` when there is none.
    ///
    /// The last `@` is taken, as WHATWG URL parsers do, so that nothing of a malformed `a@b@host` survives.
    static func userInfoRange(in string: String) -> Range<String.Index>? {
        // Every token and record write asks (a URL Foundation made is ASCII): bytes, without `NSString`'s search.
        if string.utf8.allSatisfy({ $0 < 0x80 }) { return asciiUserInfoRange(in: string) }
        guard let separator = string.range(of: "://") else { return nil }
        let authority = string[separator.upperBound...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard let at = authority.lastIndex(of: "@") else { return nil }
        return authority.startIndex..<string.index(after: at)
    }

    /// ``userInfoRange(in:)`` of an ASCII string, where a byte is a character.
    private static func asciiUserInfoRange(in string: String) -> Range<String.Index>? {
        let bytes = string.utf8
        let separator = Array("://".utf8)
        var start = bytes.startIndex
        while true {
            guard let colon = bytes[start...].firstIndex(of: UInt8(ascii: ":")) else { return nil }
            if bytes[colon...].starts(with: separator) {
                start = bytes.index(colon, offsetBy: separator.count)
                break
            }
            start = bytes.index(after: colon)
        }
        let authority = bytes[start...].prefix {
            $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#")
        }
        guard let at = authority.lastIndex(of: UInt8(ascii: "@")) else { return nil }
        return start..<bytes.index(after: at)
    }

    /// Whether `url` carries a user name or password (`user:password@host`), even an empty one.
    package static func hasUserInfo(_ url: URL) -> Bool {
        userInfoRange(in: url.absoluteString) != nil || url.user != nil || url.password != nil
    }

    /// `url` without its user information: `https://user:secret@host/a` becomes `https://host/a`.
    package static func removingUserInfo(_ url: URL) -> URL {
        let string = url.absoluteString
        if let range = userInfoRange(in: string) {
            var stripped = string
            stripped.removeSubrange(range)
            if let strippedURL = URL(string: stripped), !hasUserInfo(strippedURL) { return strippedURL }
        }
        guard hasUserInfo(url) else { return url }
        // Not reached for URLs Foundation parsed; kept so that a credential can never survive.
        var components = URLComponents(url: url, resolvingAgainstBaseURL: true)
        components?.user = nil
        components?.password = nil
        if let strippedURL = components?.url, !hasUserInfo(strippedURL) { return strippedURL }
        return placeholder
    }

    /// What a URL whose user information cannot be removed is replaced with: a host that never resolves
    /// (RFC 6761 §6.4), so a resume fails instead of carrying the credential.
    private static let placeholder = URL(string: "http://invalid.invalid/")!
}
