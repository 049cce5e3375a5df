import Foundation

/// Chooses and sanitizes the name a finished download is saved under (RFC 6266 §4.3 security considerations).
///
/// RFC 6266 §4.3 warns that a server-supplied name may try to escape the download directory (`../`), name a hidden
/// or special file, or carry characters that confuse users or tools. `sanitize(_:)` removes all of that, `choose`
/// applies the fallback chain, and `available(_:exists:)` avoids overwriting an existing file.
enum SuggestedFilename {
    /// The name used when nothing better is available.
    static let fallback = "download"
    /// The maximum length of a sanitized name, in UTF-8 bytes (most Linux file systems allow 255).
    static let maximumUTF8Length = 200
    /// The longest extension, dot included and in UTF-8 bytes, that truncation keeps.
    static let maximumPreservedExtensionUTF8Length = 16

    /// Makes a server-supplied name safe, or returns nil when nothing usable remains.
    ///
    /// Strategy (as browsers do): path separators are *replaced*, not used to split, so
    /// `../../etc/passwd` becomes `_.._etc_passwd`. Step by step:
    /// 1. Whitespace, dots and control characters are trimmed from both ends (so no hidden `.name`, no `.` or
    ///    `..`, no trailing dot or space).
    /// 2. When what remains has nothing but separators, dots, whitespace and control characters (`/`, `../`,
    ///    `...`, the empty string) the name is unusable and nil is returned.
    /// 3. Each `/` and `\`, each C0 control, DEL and C1 control, the bidirectional formatting characters (which
    ///    can disguise an extension, e.g. U+202E) and U+2028/U+2029 become `_`.
    /// 4. The result is cut to `maximumUTF8Length` UTF-8 bytes at a character boundary, keeping an extension of
    ///    at most `maximumPreservedExtensionUTF8Length` bytes.
    ///
    /// The result therefore never contains a separator and can never name another directory. Other Unicode text
    /// is kept intact and is not normalized.
    static func sanitize(_ name: String) -> String? {
        let scalars = Array(name.unicodeScalars)
        var start = scalars.startIndex
        var end = scalars.endIndex
        while start < end, isTrimmable(scalars[start]) { start += 1 }
        while end > start, isTrimmable(scalars[end - 1]) { end -= 1 }
        let core = scalars[start..<end]
        guard core.contains(where: { !isReplaced($0) && !isTrimmable($0) }) else { return nil }

        var sanitized = ""
        sanitized.unicodeScalars.append(contentsOf: core.map { isReplaced($0) ? "_" : $0 })
        return truncated(sanitized)
    }

    /// The full rule (RFC protocol rule 18): Content-Disposition filename* then filename, then the URL's last path
    /// component, then the URL's host, then `fallback`; each candidate sanitized, the first usable one wins.
    ///
    /// The last path component is the text after the final `/` of the percent-encoded path, percent-decoded (kept
    /// as sent when it does not decode); it is skipped when empty, so `http://h/dir/` yields the host `h`. An
    /// unparseable Content-Disposition header contributes nothing (RFC 6266 §4.3 falls back to the URL).
    static func choose(contentDisposition: String?, url: URL) -> String {
        var candidates: [String] = []
        if let contentDisposition, let parsed = ContentDisposition(contentDisposition) {
            if let extendedFilename = parsed.extendedFilename { candidates.append(extendedFilename) }
            if let filename = parsed.filename { candidates.append(filename) }
        }
        let path = url.path(percentEncoded: true)
        if let component = path.split(separator: "/", omittingEmptySubsequences: false).last, !component.isEmpty {
            // Without a `%` there is nothing to decode (Foundation's decoding goes through CFString: a large part of
            // a small download's start).
            candidates.append(
                component.utf8.contains(UInt8(ascii: "%"))
                    ? component.removingPercentEncoding ?? String(component) : String(component))
        }
        if let host = url.host(percentEncoded: false) {
            candidates.append(host)
        }
        return candidates.lazy.compactMap(sanitize).first ?? fallback
    }

    /// A name not yet taken according to `exists`, as browsers do: "name.ext", then "name (1).ext", "name (2).ext", …
    ///
    /// The extension is the text from the last dot when that dot is not the first character, so
    /// `archive.tar.gz` continues as `archive.tar (1).gz` and `.profile` as `.profile (1)`. The stem is shortened
    /// when needed so that a numbered name stays within `maximumUTF8Length`. `exists` is injected so tests need no
    /// file system. After 9,999 taken numbers a UUID replaces the number, so a misbehaving `exists` cannot hang.
    static func available(_ name: String, exists: (String) -> Bool) -> String {
        guard exists(name) else { return name }
        let (stem, fileExtension) = splitExtension(name)
        for number in 1...9_999 {
            let candidate = numbered(stem, "\(number)", fileExtension)
            if !exists(candidate) { return candidate }
        }
        return numbered(stem, UUID().uuidString, fileExtension)
    }

    // MARK: - Helpers

    /// Whether `scalar` is a path separator.
    private static func isSeparator(_ scalar: Unicode.Scalar) -> Bool {
        scalar == "/" || scalar == "\\"
    }

    /// Whether `scalar` is replaced by `_`: separators, C0, DEL, C1, bidi formatting, line/paragraph separators.
    private static func isReplaced(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x2F, 0x5C, 0x00...0x1F, 0x7F...0x9F, 0x061C, 0x200E, 0x200F, 0x2028...0x202E, 0x2066...0x2069:
            true
        default:
            false
        }
    }

    /// Whether `scalar` is removed from either end: whitespace, dots and replaced characters except separators.
    private static func isTrimmable(_ scalar: Unicode.Scalar) -> Bool {
        scalar == "." || scalar.properties.isWhitespace || (isReplaced(scalar) && !isSeparator(scalar))
    }

    /// `name` split before its last dot, unless that dot is the first character.
    private static func splitExtension(_ name: String) -> (stem: Substring, fileExtension: Substring) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (name[...], "") }
        return (name[..<dot], name[dot...])
    }

    /// `stem (number)fileExtension`, with the stem shortened to keep the result within `maximumUTF8Length`.
    private static func numbered(_ stem: Substring, _ number: String, _ fileExtension: Substring) -> String {
        let suffix = " (\(number))"
        let budget = maximumUTF8Length - suffix.utf8.count - fileExtension.utf8.count
        let shortened = budget > 0 && stem.utf8.count > budget ? prefix(stem, utf8Length: budget) : stem
        return shortened + suffix + fileExtension
    }

    /// `name` cut to `maximumUTF8Length` bytes, keeping a short extension and trimming the cut end.
    private static func truncated(_ name: String) -> String {
        guard name.utf8.count > maximumUTF8Length else { return name }
        var (stem, fileExtension) = splitExtension(name)
        if fileExtension.utf8.count > maximumPreservedExtensionUTF8Length {
            (stem, fileExtension) = (name[...], "")
        }
        var kept = prefix(stem, utf8Length: maximumUTF8Length - fileExtension.utf8.count)
        while let last = kept.unicodeScalars.last, isTrimmable(last) {
            kept.unicodeScalars.removeLast()
        }
        return String(kept) + fileExtension
    }

    /// The longest prefix of `text` within `length` UTF-8 bytes, cut between characters; between scalars when
    /// even the first character is longer than that.
    private static func prefix(_ text: Substring, utf8Length length: Int) -> Substring {
        var used = 0
        var end = text.startIndex
        for character in text {
            used += character.utf8.count
            guard used <= length else { break }
            end = text.index(after: end)
        }
        if end == text.startIndex {
            used = 0
            for scalar in text.unicodeScalars {
                used += scalar.utf8.count
                guard used <= length else { break }
                end = text.unicodeScalars.index(after: end)
            }
        }
        return text[..<end]
    }
}
