/// Text from outside (tokens, servers, arguments) made safe to print on a terminal.
///
/// A hostile token or server could otherwise put terminal control sequences into what the tool prints: ESC
/// (`\u{1B}[2J` clears the screen; other sequences retitle the window, write to the clipboard or fake earlier
/// output), a carriage return that overwrites a line, or a bidirectional override that shows a name backwards.
/// Each such character is shown as a Swift-style escape, e.g. ESC as `\u{1B}`:
/// - C0 controls U+0000–U+001F (tab and line feed too, unless kept), DEL U+007F and C1 controls U+0080–U+009F;
/// - the bidirectional formatting characters U+061C, U+200E, U+200F, U+202A–U+202E and U+2066–U+2069;
/// - the line and paragraph separators U+2028 and U+2029.
///
/// Everything else, other Unicode text included, is printed as is.
enum TerminalText {
    /// `text` with every character listed above escaped; with `keepingLineBreaks`, line feeds and tabs stay (for
    /// multi-line messages whose layout is the tool's own).
    static func escaped(_ text: String, keepingLineBreaks: Bool = false) -> String {
        guard text.unicodeScalars.contains(where: { needsEscape($0, keepingLineBreaks: keepingLineBreaks) }) else {
            return text
        }
        var result = ""
        result.unicodeScalars.reserveCapacity(text.unicodeScalars.count)
        for scalar in text.unicodeScalars {
            if needsEscape(scalar, keepingLineBreaks: keepingLineBreaks) {
                result += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    /// Whether `scalar` is printed escaped.
    static func needsEscape(_ scalar: Unicode.Scalar, keepingLineBreaks: Bool = false) -> Bool {
        switch scalar.value {
        case 0x0A, 0x09: return !keepingLineBreaks
        case 0x00...0x1F, 0x7F...0x9F: return true
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: return true
        case 0x2028, 0x2029: return true
        default: return false
        }
    }
}
