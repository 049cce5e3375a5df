/// The rules for a SHA-256 digest written as text: what ``DownloadTask/Configuration/expectedSHA256`` and a token's
/// `expectedSHA256` accept.
package enum SHA256Digest {
    /// `text` as 64 lowercase hexadecimal digits, when it is 64 hexadecimal digits in either case; `nil` otherwise.
    package static func normalized(_ text: String) -> String? {
        let utf8 = Array(text.utf8)
        guard utf8.count == 64, utf8.allSatisfy(isHexDigit) else { return nil }
        return text.lowercased()
    }

    /// Whether `text` is exactly 64 lowercase hexadecimal digits, the form tokens store.
    static func isLowercaseHex(_ text: String) -> Bool {
        normalized(text) == text
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte) || (0x41...0x46).contains(byte)
    }
}
