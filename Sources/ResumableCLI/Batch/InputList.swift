import Foundation
import Resumable

/// The list of downloads of `resumable get -i FILE`, written like aria2's input file (`aria2c -i`).
///
/// ```
/// # Comment lines start with '#'; blank lines are skipped.
/// https://example.com/disk.iso
///   out=debian.iso
///   sha256=0123…cdef
/// https://example.com/notes.txt
/// ```
///
/// The rules, as in aria2:
/// - A line that starts in column 0 (not with a space or a tab) is a URL; each URL is one download.
/// - A line that starts with spaces or tabs is an option, `name=value`, of the URL above it. Spaces and tabs
///   around the name and the value are ignored.
/// - A line whose first character other than spaces and tabs is `#` is a comment; a line of only spaces and tabs
///   is blank. Both are skipped, also between a URL and its options.
/// - Lines end with LF or CRLF; a byte order mark at the very start is skipped; trailing spaces and tabs are
///   ignored.
///
/// Options: `out=NAME`, the finished file's name in the output directory, and `sha256=HEX` (or aria2's
/// `checksum=sha-256=HEX`), the SHA-256 the finished file must have.
///
/// Where aria2 is lenient, this parser is strict, because a list is often written by another program and a slip
/// must not download something other than what was meant: every problem is an ``InputListError`` naming the
/// line, never a skipped line or a trap.
/// - An option this tool does not know (aria2's `dir=`, `header=`, a typo such as `ot=`) is an error, not a
///   warning: ignoring `dir=` or `header=` would put the file elsewhere or fetch it without the header.
/// - Several URLs on one line separated by TAB are mirrors of one file in aria2; that is not supported and is an
///   error (a space inside a URL is one as well: write it as `%20`).
/// - A URL must be absolute http or https with a host.
/// - `out=` must be a plain file name that the library's file-name rules keep unchanged (``plainFileNameProblem(_:)``):
///   no `/` or `\`, no leading `.` (so neither `.` nor `..`), no leading or trailing space, no control or
///   bidirectional formatting character, at most 200 UTF-8 bytes, and not ending in `.resumable.json` (the name of
///   the resume token another entry may keep in the same directory).
/// - Two entries with the same `out=` name are an error naming both lines; names that differ only in case count
///   as the same, since they are the same file on a case-insensitive file system (macOS, Windows shares).
/// - An option given twice for one URL (`sha256=` and `checksum=` included) is an error.
///
/// An empty list (nothing but comments and blank lines) parses to no entries; what to do then is the command's
/// choice.
enum InputList {
    /// One download of the list.
    struct Entry: Sendable, Equatable {
        /// The URL, absolute http or https with a host.
        let url: URL
        /// `out=`: the finished file's name, a plain file name; `nil` for the server's name.
        let outputName: String?
        /// `sha256=` or `checksum=sha-256=`: the expected SHA-256, 64 lowercase hexadecimal digits.
        let sha256: String?
        /// The line of the URL, counting from 1.
        let line: Int
    }

    /// The largest list ``read(path:)`` accepts, in bytes.
    static let maximumSize = 16 << 20

    /// The option names this parser knows, as shown in errors.
    static let supportedOptions = "out, sha256, checksum=sha-256"

    /// The entries of `text`, in order, or an error naming the first line at fault.
    static func parse(_ text: String) throws(InputListError) -> [Entry] {
        var scalars = Substring(text).unicodeScalars
        if scalars.first == "\u{FEFF}" { scalars.removeFirst() }

        var entries: [Entry] = []
        /// The `out=` names so far, lowercased, with the name as written and its line.
        var names: [String: (name: String, line: Int)] = [:]
        func finish(_ entry: PendingEntry) throws(InputListError) {
            if let name = entry.outputName, let line = entry.optionLines["out"] {
                if let earlier = names[name.lowercased()] {
                    throw InputListError(
                        line: line, .duplicateOutputName(name, firstLine: earlier.line, firstName: earlier.name))
                }
                names[name.lowercased()] = (name, line)
            }
            entries.append(entry.entry)
        }
        var current: PendingEntry?
        var lineNumber = 0
        for rawLine in scalars.split(separator: "\n", omittingEmptySubsequences: false) {
            lineNumber += 1
            var line = rawLine
            if line.last == "\r" { line.removeLast() }
            while let last = line.last, isBlank(last) { line.removeLast() }
            guard let first = line.first else { continue }

            if isBlank(first) {
                let option = line.drop(while: isBlank)
                if option.first == "#" { continue }
                guard var entry = current else { throw InputListError(line: lineNumber, .optionWithoutURL) }
                try entry.apply(option, line: lineNumber)
                current = entry
            } else if first == "#" {
                continue
            } else {
                if let entry = current { try finish(entry) }
                current = try PendingEntry(urlLine: line, line: lineNumber)
            }
        }
        if let entry = current { try finish(entry) }
        return entries
    }

    /// The entries of UTF-8 `bytes`; invalid UTF-8 is an error naming its line, not a replacement character.
    static func parse(bytes: some Collection<UInt8>) throws(InputListError) -> [Entry] {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            // The line of the first invalid sequence: decode line by line until one fails.
            var lineNumber = 0
            for line in bytes.split(separator: 0x0A, omittingEmptySubsequences: false) {
                lineNumber += 1
                if String(validating: line, as: UTF8.self) == nil { break }
            }
            throw InputListError(line: lineNumber, .invalidUTF8)
        }
        return try parse(text)
    }

    /// The entries of the list file at `path`, or of standard input for `-`.
    ///
    /// The list is read whole before anything is downloaded (a list with an error downloads nothing); more than
    /// ``maximumSize`` bytes is an error.
    static func read(path: String) throws(InputListError) -> [Entry] {
        let handle: FileHandle
        if path == "-" {
            handle = FileHandle.standardInput
        } else {
            do {
                handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
            } catch {
                throw InputListError(line: nil, .unreadable(reason: Self.reason(error)))
            }
        }
        defer { if path != "-" { try? handle.close() } }
        var bytes: [UInt8] = []
        do {
            while let chunk = try handle.read(upToCount: 1 << 16), !chunk.isEmpty {
                bytes += chunk
                if bytes.count > maximumSize { throw InputListError(line: nil, .tooLarge(limit: maximumSize)) }
            }
        } catch let error as InputListError {
            throw error
        } catch {
            throw InputListError(line: nil, .unreadable(reason: Self.reason(error)))
        }
        return try parse(bytes: bytes)
    }

    /// Why `name` is not a plain file name for `out=`, or `nil` when it is one.
    ///
    /// A plain name is one the library's sanitizing of suggested names (`SuggestedFilename.sanitize`, which a
    /// resume token's file name must pass unchanged) keeps exactly as it is, so the name given is the name the
    /// file gets, in the output directory and nowhere else.
    static func plainFileNameProblem(_ name: String) -> String? {
        let scalars = name.unicodeScalars
        guard let first = scalars.first, let last = scalars.last else { return "is empty" }
        if let scalar = scalars.first(where: { $0 == "/" || $0 == "\\" }) {
            return "contains '\(scalar)': it must be a file name, not a path"
        }
        if let scalar = scalars.first(where: isControlOrFormatting) {
            return "contains the control or formatting character \(codePoint(scalar))"
        }
        if first == "." { return "starts with '.' (a hidden file, or '.' or '..')" }
        if first.properties.isWhitespace { return "starts with a space" }
        if last == "." || last.properties.isWhitespace { return "ends with '.' or a space" }
        if name.utf8.count > maximumNameLength { return "is longer than \(maximumNameLength) bytes" }
        if name.lowercased().hasSuffix(tokenSuffix) { return "ends with '\(tokenSuffix)', the name of a resume token" }
        return nil
    }

    // MARK: - Helpers

    /// The ending of the resume token files kept beside downloads: another entry's token could have that name.
    private static let tokenSuffix = ".resumable.json"

    /// The library's limit for a file name, in UTF-8 bytes (`SuggestedFilename.maximumUTF8Length`).
    private static let maximumNameLength = 200

    /// An entry whose option lines may still follow.
    private struct PendingEntry {
        let url: URL
        let line: Int
        var outputName: String?
        var sha256: String?
        /// The line each option was given on, by the name reported for a repetition (`sha256` for `checksum` too).
        private(set) var optionLines: [String: Int] = [:]

        var entry: Entry {
            Entry(url: url, outputName: outputName, sha256: sha256, line: line)
        }

        init(urlLine: Substring.UnicodeScalarView, line: Int) throws(InputListError) {
            self.line = line
            let text = String(Substring(urlLine))
            // The usual line, printable ASCII only (no blank, tab or control), passes every check below: a list of
            // thousands of URLs is not looked up scalar by scalar in Unicode's property tables.
            if !text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) {
                let parts = urlLine.split(separator: "\t").filter { !$0.allSatisfy(InputList.isBlank) }
                if parts.count > 1 { throw InputListError(line: line, .mirrors) }
                if let scalar = text.unicodeScalars.first(where: InputList.isControlOrFormatting) {
                    throw InputListError(line: line, .controlCharacter(scalar))
                }
                if text.unicodeScalars.contains(where: { $0.properties.isWhitespace }) {
                    throw InputListError(line: line, .spaceInURL(text))
                }
            }
            guard let url = URL(string: text) else { throw InputListError(line: line, .invalidURL(text)) }
            switch HTTPURL.problem(with: url) {
            case .tooLong(let bytes): throw InputListError(line: line, .urlTooLong(bytes))
            case .notHTTP: throw InputListError(line: line, .invalidURL(text))
            case nil: break
            }
            // A batch's downloads live in a state directory, which never keeps a credential: refused here, with the
            // line, before anything is written, rather than by the queue halfway through adding the list.
            if HTTPURL.hasUserInfo(url) {
                throw InputListError(line: line, .credentialsInURL(HTTPURL.removingUserInfo(url).absoluteString))
            }
            self.url = url
        }

        /// Applies the option line `option` (without its leading blanks).
        mutating func apply(_ option: Substring.UnicodeScalarView, line: Int) throws(InputListError) {
            let text = String(String.UnicodeScalarView(option))
            if let scalar = option.first(where: { $0 != "\t" && InputList.isControlOrFormatting($0) }) {
                throw InputListError(line: line, .controlCharacter(scalar))
            }
            guard let equals = text.firstIndex(of: "=") else {
                throw InputListError(line: line, .malformedOption(text))
            }
            let name = InputList.trimmed(text[..<equals])
            let value = InputList.trimmed(text[text.index(after: equals)...])
            switch name {
            case "out":
                try record("out", line: line)
                guard !value.isEmpty else { throw InputListError(line: line, .emptyValue(name)) }
                if let problem = InputList.plainFileNameProblem(value) {
                    throw InputListError(line: line, .invalidOutputName(value, problem: problem))
                }
                outputName = value
            case "sha256":
                try record("sha256", line: line)
                sha256 = try Self.digest(value, line: line)
            case "checksum":
                try record("sha256", line: line)
                guard let separator = value.firstIndex(of: "=") else {
                    throw InputListError(line: line, .invalidChecksum(value))
                }
                let type = value[..<separator].lowercased()
                guard type == "sha-256" || type == "sha256" else {
                    throw InputListError(line: line, .unsupportedChecksumType(String(value[..<separator])))
                }
                sha256 = try Self.digest(String(value[value.index(after: separator)...]), line: line)
            default:
                throw InputListError(line: line, name.isEmpty ? .malformedOption(text) : .unknownOption(name))
            }
        }

        private mutating func record(_ name: String, line: Int) throws(InputListError) {
            if let earlier = optionLines[name] {
                throw InputListError(line: line, .repeatedOption(name, firstLine: earlier))
            }
            optionLines[name] = line
        }

        private static func digest(_ value: String, line: Int) throws(InputListError) -> String {
            guard let digest = SHA256Digest.normalized(value) else {
                throw InputListError(line: line, .invalidSHA256(value))
            }
            return digest
        }
    }

    /// A space or a tab: what indents an option line.
    private static func isBlank(_ scalar: Unicode.Scalar) -> Bool {
        scalar == " " || scalar == "\t"
    }

    /// What the library's file-name rules replace other than separators: C0 and C1 controls, DEL, bidirectional
    /// formatting characters, U+2028 and U+2029 (the characters ``TerminalText`` escapes).
    fileprivate static func isControlOrFormatting(_ scalar: Unicode.Scalar) -> Bool {
        TerminalText.needsEscape(scalar)
    }

    private static func trimmed(_ text: Substring) -> String {
        let scalars = text.unicodeScalars.drop(while: isBlank)
        var end = scalars.endIndex
        while end > scalars.startIndex, isBlank(scalars[scalars.index(before: end)]) {
            end = scalars.index(before: end)
        }
        return String(String.UnicodeScalarView(scalars[scalars.startIndex..<end]))
    }

    fileprivate static func codePoint(_ scalar: Unicode.Scalar) -> String {
        let hex = String(scalar.value, radix: 16, uppercase: true)
        return "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }

    private static func reason(_ error: any Error) -> String {
        error.localizedDescription
    }
}

/// Why an input list (``InputList``) cannot be used: the line and what is wrong with it.
struct InputListError: Error, Sendable, Equatable {
    /// What is wrong.
    enum Reason: Sendable, Equatable {
        /// The file cannot be read (missing, a directory, no permission).
        case unreadable(reason: String)
        /// The file is larger than ``InputList/maximumSize``.
        case tooLarge(limit: Int)
        /// The line is not valid UTF-8.
        case invalidUTF8
        /// An indented option line comes before any URL.
        case optionWithoutURL
        /// Several TAB-separated URLs on one line: aria2's mirrors, not supported.
        case mirrors
        /// A URL line with a space in it.
        case spaceInURL(String)
        /// A URL line that is not an absolute http or https URL with a host.
        case invalidURL(String)
        /// A URL longer than the library takes (``HTTPURL/maximumLength``), with its length in bytes.
        case urlTooLong(Int)
        /// A URL with a user name or password (shown without them), which a state directory cannot keep.
        case credentialsInURL(String)
        /// A control or bidirectional formatting character in a URL or option line.
        case controlCharacter(Unicode.Scalar)
        /// An option line that is not `name=value`.
        case malformedOption(String)
        /// An option this tool does not support.
        case unknownOption(String)
        /// An option given twice for one URL (`sha256` stands for `checksum` too).
        case repeatedOption(String, firstLine: Int)
        /// `name=` with nothing after it.
        case emptyValue(String)
        /// `out=` that is not a plain file name.
        case invalidOutputName(String, problem: String)
        /// A `sha256=` value that is not 64 hexadecimal digits.
        case invalidSHA256(String)
        /// A `checksum=` value that is not `TYPE=DIGEST`.
        case invalidChecksum(String)
        /// A `checksum=` type other than SHA-256.
        case unsupportedChecksumType(String)
        /// An `out=` name that an earlier entry already uses (on `firstLine`, as `firstName`), ignoring case.
        case duplicateOutputName(String, firstLine: Int, firstName: String)
    }

    /// The line at fault, counting from 1; `nil` for the file as a whole.
    let line: Int?
    /// What is wrong.
    let reason: Reason

    init(line: Int?, _ reason: Reason) {
        self.line = line
        self.reason = reason
    }

    /// `line 3: unknown option 'dir' (supported: …)`; text from the list is quoted, escaped and shortened.
    var message: String {
        let prefix = line.map { "line \($0): " } ?? ""
        return prefix + description
    }

    private var description: String {
        switch reason {
        case .unreadable(let reason):
            return "cannot read the list: \(reason)"
        case .tooLarge(let limit):
            return "the list is larger than \(limit) bytes"
        case .invalidUTF8:
            return "the text is not valid UTF-8"
        case .optionWithoutURL:
            return "an option line (indented) comes before any URL"
        case .mirrors:
            return "several URLs separated by tabs (aria2's mirrors) are not supported: put one URL per line"
        case .spaceInURL(let text):
            return "a URL cannot contain spaces (write a space as %20; several URLs on one line, aria2's mirrors, "
                + "are not supported): \(Self.quoted(text))"
        case .invalidURL(let text):
            let hint =
                text.contains("=") && !text.contains("://") ? " (an option line must start with a space or a tab)" : ""
            return "not an http or https URL: \(Self.quoted(text))\(hint)"
        case .urlTooLong(let length):
            return HTTPURL.Problem.tooLong(bytes: length).description
        case .credentialsInURL(let text):
            return "a URL with a user name or password cannot be kept in the state directory: send credentials "
                + "with --header or --sensitive-header instead (\(Self.quoted(text)), shown without them)"
        case .controlCharacter(let scalar):
            return "the line contains the control or formatting character \(InputList.codePoint(scalar))"
        case .malformedOption(let text):
            return "an option line must be name=value, not \(Self.quoted(text))"
        case .unknownOption(let name):
            return "unknown option \(Self.quoted(name)) (supported: \(InputList.supportedOptions))"
        case .repeatedOption(let name, let firstLine):
            let what = name == "sha256" ? "a checksum (sha256= or checksum=)" : "option '\(name)'"
            return "\(what) is given twice for one URL, on lines \(firstLine) and this one"
        case .emptyValue(let name):
            return "option \(Self.quoted(name)) needs a value"
        case .invalidOutputName(let name, let problem):
            return "out=\(Self.quoted(name)) is not a plain file name: it \(problem)"
        case .invalidSHA256(let value):
            return "a SHA-256 must be 64 hexadecimal digits, not \(Self.quoted(value))"
        case .invalidChecksum(let value):
            return "checksum must be sha-256=DIGEST, not \(Self.quoted(value))"
        case .unsupportedChecksumType(let type):
            return "checksum type \(Self.quoted(type)) is not supported (only sha-256)"
        case .duplicateOutputName(let name, let firstLine, let firstName):
            let same = name == firstName ? "" : " (\(Self.quoted(firstName)), the same name in another case)"
            return "out=\(Self.quoted(name)) is already the name of the download on line \(firstLine)\(same)"
        }
    }

    /// `'text'`, escaped for a terminal and cut to 200 characters: a list line can be megabytes long.
    private static func quoted(_ text: String) -> String {
        let limit = 200
        let shown = text.count > limit ? String(text.prefix(limit)) + "…" : text
        return "'" + TerminalText.escaped(shown) + "'"
    }
}
