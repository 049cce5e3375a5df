import Foundation
import Testing

@testable import Resumable
@testable import ResumableCLI

/// The list of `resumable get -i`: aria2's input-file format, read strictly.
@Suite("Batch input list")
struct InputListTests {
    private static let digest = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

    /// The error `text` gives; records an issue when it parses.
    private func error(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> InputListError? {
        do {
            let entries = try InputList.parse(text)
            Issue.record("expected an error, got \(entries)", sourceLocation: sourceLocation)
            return nil
        } catch {
            return error
        }
    }

    @Test("aria2's example: a URL per line, indented options for the URL above, comments and blank lines skipped")
    func aria2Example() throws {
        let text = """
            # downloads for tonight
            http://server/file.iso
              out=file.img
            \t# a comment between options
            \tsha256=\(Self.digest.uppercased())

            https://foo/bar
            https://example.com/a%20b?x=1#frag
            \tchecksum=SHA-256=\(Self.digest)
            """
        let entries = try InputList.parse(text)
        #expect(
            entries == [
                InputList.Entry(
                    url: URL(string: "http://server/file.iso")!, outputName: "file.img", sha256: Self.digest, line: 2),
                InputList.Entry(url: URL(string: "https://foo/bar")!, outputName: nil, sha256: nil, line: 7),
                InputList.Entry(
                    url: URL(string: "https://example.com/a%20b?x=1#frag")!, outputName: nil, sha256: Self.digest,
                    line: 8),
            ])
    }

    @Test("CRLF line ends, a byte order mark, trailing blanks and spaces around '=' are accepted")
    func lineEndsAndBlanks() throws {
        let text = "\u{FEFF}http://h/a \t\r\n   out = a.bin \t\r\n\r\n  \t \r\nhttp://h/b\r\n\tout=b.bin"
        let entries = try InputList.parse(text)
        #expect(entries.map(\.url.absoluteString) == ["http://h/a", "http://h/b"])
        #expect(entries.map(\.outputName) == ["a.bin", "b.bin"])
        #expect(entries.map(\.line) == [1, 5])
        #expect(try InputList.parse("") == [])
        #expect(try InputList.parse("# only a comment\n\n   \n") == [])
        #expect(try InputList.parse("\u{FEFF}") == [])
    }

    @Test("A trailing tab after a URL is not a mirror; a byte order mark after the start is not skipped")
    func tabsAndMarks() throws {
        #expect(try InputList.parse("http://h/a\t\t").map(\.url.absoluteString) == ["http://h/a"])
        #expect(error("\n\u{FEFF}http://h/a")?.reason == .invalidURL("\u{FEFF}http://h/a"))
    }

    @Test(
        "Every error names its line and says what is wrong",
        arguments: [
            ("  out=a", 1, InputListError.Reason.optionWithoutURL),
            ("http://h/a\thttp://mirror/a", 1, .mirrors),
            ("# c\nhttp://h/a b", 2, .spaceInURL("http://h/a b")),
            ("ftp://h/a", 1, .invalidURL("ftp://h/a")),
            ("# c\nhttp://user:secret@h/a", 2, .credentialsInURL("http://h/a")),
            ("http://h/a\nhttps://:@h/b", 2, .credentialsInURL("https://h/b")),
            ("file:///etc/passwd", 1, .invalidURL("file:///etc/passwd")),
            ("h/a", 1, .invalidURL("h/a")),
            ("http://", 1, .invalidURL("http://")),
            ("out=a.txt", 1, .invalidURL("out=a.txt")),
            ("http://h/\u{1B}[2J", 1, .controlCharacter("\u{1B}")),
            ("http://h/a\u{202E}", 1, .controlCharacter("\u{202E}")),
            // Just outside the printable-ASCII lines that skip these checks: DEL, a C1 control, Unicode spaces.
            ("http://h/a\u{7F}", 1, .controlCharacter("\u{7F}")),
            ("http://h/a\u{85}", 1, .controlCharacter("\u{85}")),
            ("http://h/a\u{A0}b", 1, .spaceInURL("http://h/a\u{A0}b")),
            ("http://h/a\u{3000}b", 1, .spaceInURL("http://h/a\u{3000}b")),
            ("http://h/a\n  out=a\u{0}b", 2, .controlCharacter("\u{0}")),
            ("http://h/a\rhttp://h/b", 1, .controlCharacter("\r")),
            ("http://h/a\n  out", 2, .malformedOption("out")),
            ("http://h/a\n  =a", 2, .malformedOption("=a")),
            ("http://h/a\n  dir=/tmp", 2, .unknownOption("dir")),
            ("http://h/a\n  ot=a", 2, .unknownOption("ot")),
            ("http://h/a\n  OUT=a", 2, .unknownOption("OUT")),
            ("http://h/a\n  out=a\n  out=b", 3, .repeatedOption("out", firstLine: 2)),
            (
                "http://h/a\n  sha256=\(digest)\n  checksum=sha-256=\(digest)", 3,
                .repeatedOption("sha256", firstLine: 2)
            ),
            ("http://h/a\n  out=", 2, .emptyValue("out")),
            (
                "http://h/a\n  out=a/b", 2,
                .invalidOutputName("a/b", problem: "contains '/': it must be a file name, not a path")
            ),
            ("http://h/a\n  sha256=\(digest.dropLast())", 2, .invalidSHA256(String(digest.dropLast()))),
            ("http://h/a\n  sha256=\(digest.dropLast())g", 2, .invalidSHA256(String(digest.dropLast()) + "g")),
            ("http://h/a\n  sha256=", 2, .invalidSHA256("")),
            ("http://h/a\n  checksum=\(digest)", 2, .invalidChecksum(digest)),
            ("http://h/a\n  checksum=md5=d41d8cd98f00b204e9800998ecf8427e", 2, .unsupportedChecksumType("md5")),
            (
                "http://h/a\n  checksum=sha-1=da39a3ee5e6b4b0d3255bfef95601890afd80709", 2,
                .unsupportedChecksumType("sha-1")
            ),
            ("http://h/a\n  out=x\nhttp://h/b\n\n  out=x", 5, .duplicateOutputName("x", firstLine: 2, firstName: "x")),
            (
                "http://h/a\n out=Read.ME\nhttp://h/b\n out=read.me", 4,
                .duplicateOutputName("read.me", firstLine: 2, firstName: "Read.ME")
            ),
        ] as [(String, Int, InputListError.Reason)])
    func errors(text: String, line: Int, reason: InputListError.Reason) {
        let error = error(text)
        #expect(error?.line == line)
        #expect(error?.reason == reason)
        #expect(error?.message.hasPrefix("line \(line): ") == true)
    }

    @Test("Messages for people: the option lists, the hint for an unindented option, both lines of a duplicate")
    func messages() {
        #expect(
            error("http://h/a\n  dir=/tmp")?.message
                == "line 2: unknown option 'dir' (supported: out, sha256, checksum=sha-256)")
        #expect(
            error("out=a.txt")?.message
                == "line 1: not an http or https URL: 'out=a.txt' (an option line must start with a space or a tab)")
        #expect(
            error("http://h/a\n out=Read.ME\nhttp://h/b\n out=read.me")?.message
                == "line 4: out='read.me' is already the name of the download on line 2 ('Read.ME', the same name in "
                + "another case)")
        #expect(
            error("http://h/a\n  sha256=1\n  checksum=sha-256=2")?.message
                == "line 2: a SHA-256 must be 64 hexadecimal digits, not '1'")
        #expect(
            error("http://h/a\n  sha256=\(Self.digest)\n  checksum=sha-256=\(Self.digest)")?.message
                == "line 3: a checksum (sha256= or checksum=) is given twice for one URL, on lines 2 and this one")
        #expect(
            error("http://h/a\thttp://m/a")?.message
                == "line 1: several URLs separated by tabs (aria2's mirrors) are not supported: put one URL per line")
        #expect(
            InputListError(line: nil, .tooLarge(limit: 10)).message == "the list is larger than 10 bytes")
    }

    @Test("Text from the list is escaped and shortened in messages")
    func hostileMessages() throws {
        let hostile = try #require(error("http://h/a\n  \u{1B}]0;title\u{7}=x"))
        #expect(hostile.reason == .controlCharacter("\u{1B}"))
        #expect(hostile.message == "line 2: the line contains the control or formatting character U+001B")
        let unknown = try #require(error("http://h/a\n  o\tut=x"))
        #expect(unknown.message == "line 2: unknown option 'o\\u{9}ut' (supported: out, sha256, checksum=sha-256)")
        let huge = String(repeating: "x", count: 1_000_000)
        let long = try #require(error("http://h/a\n  \(huge)=1"))
        #expect(long.message.count < 400)
        #expect(long.message.contains("xxx…'"))
    }

    @Test(
        "out= must be a plain file name",
        arguments: [
            ("a/b", "contains '/': it must be a file name, not a path"),
            ("../etc/passwd", "contains '/': it must be a file name, not a path"),
            ("a\\b", "contains '\\': it must be a file name, not a path"),
            (".", "starts with '.' (a hidden file, or '.' or '..')"),
            ("..", "starts with '.' (a hidden file, or '.' or '..')"),
            (".bashrc", "starts with '.' (a hidden file, or '.' or '..')"),
            ("a.", "ends with '.' or a space"),
            ("\u{A0}a", "starts with a space"),
            ("a\u{3000}", "ends with '.' or a space"),
            ("a\u{7F}b", "contains the control or formatting character U+007F"),
            ("a\u{85}b", "contains the control or formatting character U+0085"),
            ("gpj.\u{202E}exe", "contains the control or formatting character U+202E"),
            ("a\u{2028}b", "contains the control or formatting character U+2028"),
            (String(repeating: "é", count: 101), "is longer than 200 bytes"),
            ("disk.iso.resumable.json", "ends with '.resumable.json', the name of a resume token"),
            ("DISK.RESUMABLE.JSON", "ends with '.resumable.json', the name of a resume token"),
        ])
    func outputNames(name: String, problem: String) {
        #expect(InputList.plainFileNameProblem(name) == problem)
        // A control or formatting character is refused for the whole line before the name is looked at.
        let control = name.unicodeScalars.first { TerminalText.needsEscape($0) }
        #expect(
            error("http://h/a\n  out=\(name)")?.reason
                == control.map { .controlCharacter($0) } ?? .invalidOutputName(name, problem: problem))
    }

    @Test("Plain names are kept exactly, Unicode included, up to 200 bytes")
    func plainNames() throws {
        for name in [
            "a", "disk.iso", "日本語.txt", "e\u{301}", "a b", "a.resumable.json.txt", String(repeating: "é", count: 100),
        ] {
            #expect(InputList.plainFileNameProblem(name) == nil, "\(name)")
            #expect(try InputList.parse("http://h/a\n out=\(name)").first?.outputName == name)
        }
    }

    @Test("A plain name is exactly one the library's sanitizing keeps unchanged (except a token's name)")
    func plainNamesMatchTheLibrary() {
        let samples = [
            "a", ".a", "a.", " a", "a ", "a/b", "a\\b", "..", "\u{1B}", "a\u{200E}", "\u{FEFF}a", "a\u{A0}", "\u{2066}",
            String(repeating: "x", count: 200), String(repeating: "x", count: 201), "x\u{301}", "\t", "a\u{0}",
        ]
        for name in samples {
            #expect(
                (InputList.plainFileNameProblem(name) == nil) == (SuggestedFilename.sanitize(name) == name),
                "\(name.debugDescription)")
        }
    }

    @Test("Megabyte lines are read or refused in linear time, their text shortened in the message")
    func hugeLines() throws {
        let huge = String(repeating: "a", count: 2 << 20)
        // A URL over the library's limit (64 KiB) is refused with its length; one at the limit is read.
        let tooLong = try #require(error("http://h/" + huge))
        #expect(tooLong.reason == .urlTooLong(huge.count + 9))
        #expect(tooLong.message.count < 400)
        let longest = "http://h/" + String(repeating: "a", count: HTTPURL.maximumLength - 9)
        #expect(try InputList.parse(longest).first?.url.absoluteString == longest)
        let long = try #require(error("http://h/a\n  out=" + huge))
        #expect(long.reason == .invalidOutputName(huge, problem: "is longer than 200 bytes"))
        #expect(long.message.count < 400)
    }

    @Test("Invalid UTF-8 is an error naming its line, not a replacement character")
    func invalidUTF8() throws {
        var bytes = Array("http://h/a\n  out=a\n".utf8)
        bytes += [0x20, 0x20, 0x6F, 0x75, 0x74, 0x3D, 0xFF, 0x0A]
        #expect(throws: InputListError(line: 3, .invalidUTF8)) { try InputList.parse(bytes: bytes) }
        #expect(try InputList.parse(bytes: Array("http://h/é".utf8)).count == 1)
    }

    @Test("A list file is read whole; a missing file or one above the size limit is an error")
    func readFile() throws {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("resumable-inputlist-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }

        let list = directory.appendingPathComponent("urls.txt")
        try Data("http://h/a\n  out=a\nhttp://h/b\n".utf8).write(to: list)
        #expect(try InputList.read(path: list.path).map(\.line) == [1, 3])

        let missing = directory.appendingPathComponent("missing.txt").path
        #expect {
            try InputList.read(path: missing)
        } throws: { error in
            guard let error = error as? InputListError, case .unreadable = error.reason else { return false }
            return error.line == nil
        }
        #expect {
            try InputList.read(path: directory.path)
        } throws: { error in
            guard let error = error as? InputListError, case .unreadable = error.reason else { return false }
            return true
        }

        let large = directory.appendingPathComponent("large.txt")
        try Data(repeating: 0x23, count: InputList.maximumSize + 1).write(to: large)
        #expect(throws: InputListError(line: nil, .tooLarge(limit: InputList.maximumSize))) {
            try InputList.read(path: large.path)
        }
    }
}
