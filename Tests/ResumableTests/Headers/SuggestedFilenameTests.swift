import Foundation
import Testing

@testable import Resumable

/// Tests for `SuggestedFilename`: sanitizing (cases in `Fixtures/headers/suggested-filename.json`), the
/// fallback order of `choose`, and collision naming.
struct SuggestedFilenameTests {
    /// One fixture case: a hostile or ordinary name and the sanitized result, nil when nothing usable remains.
    struct Case: Decodable, Sendable, CustomTestStringConvertible {
        let name: String
        let input: String
        let expected: String?

        var testDescription: String { name }
    }

    static let cases: [Case] = (try? Fixtures.decode([Case].self, from: "headers/suggested-filename.json")) ?? []

    /// Checks every guarantee `sanitize` documents.
    static func isSafe(_ name: String) -> Bool {
        let forbidden = name.unicodeScalars.contains { scalar in
            scalar == "/" || scalar == "\\" || scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
                || scalar.value == 0x202E
        }
        return !forbidden && !name.isEmpty && !name.hasPrefix(".") && name != "." && name != ".."
            && name.utf8.count <= SuggestedFilename.maximumUTF8Length
            && name.first?.isWhitespace == false && name.last?.isWhitespace == false
    }

    @Test("The fixture file loads and has cases")
    func fixtureLoads() throws {
        let cases = try Fixtures.decode([Case].self, from: "headers/suggested-filename.json")
        #expect(cases.count > 40)
    }

    @Test("A name sanitizes to the expected safe name or to nothing", arguments: cases)
    func sanitizes(_ fixture: Case) {
        let sanitized = SuggestedFilename.sanitize(fixture.input)
        #expect(sanitized == fixture.expected)
        if let sanitized {
            #expect(Self.isSafe(sanitized))
            #expect(SuggestedFilename.sanitize(sanitized) == sanitized, "sanitizing is idempotent")
        }
    }

    @Test("Sanitizing random hostile text always yields a safe name or nil")
    func sanitizesRandomText() {
        let alphabet: [Character] = [
            "a", "Z", "0", ".", ".", "/", "\\", " ", "\t", "\n", "\u{0}", "\u{7F}", "\u{85}", "\u{A0}", "\u{202E}",
            "é", "e\u{301}", "😀", "👨‍👩‍👧", "_", "-", "%", ":",
        ]
        var generator = SplitMix64(seed: 0x5EED)
        for _ in 0..<2_000 {
            let length = Int(generator.next() % 300)
            let text = String((0..<length).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] })
            if let sanitized = SuggestedFilename.sanitize(text) {
                #expect(Self.isSafe(sanitized), "\(text.debugDescription) → \(sanitized.debugDescription)")
            }
        }
    }

    @Test(
        "The name comes from filename*, then filename, then the URL path, then the host, then the fallback",
        arguments: [
            (nil, "http://h/dir/", "h"),
            (nil, "http://h/a%20b.txt", "a b.txt"),
            (nil, "http://127.0.0.1/", "127.0.0.1"),
            (nil, "http://h", "h"),
            (nil, "http://h/file.bin?name=other.zip#frag", "file.bin"),
            (nil, "http://h/%2E%2E", "h"),
            (nil, "http://h/..%2F..%2Fetc%2Fpasswd", "_.._etc_passwd"),
            (nil, "http://h/%FF.bin", "%FF.bin"),
            (nil, "file:///", "download"),
            ("attachment; filename=\"cd.txt\"", "http://h/url.txt", "cd.txt"),
            ("attachment; filename=\"plain.txt\"; filename*=UTF-8''%e2%82%ac.txt", "http://h/url.txt", "€.txt"),
            ("attachment; filename=\"plain.txt\"; filename*=UTF-8''..%2F", "http://h/url.txt", "plain.txt"),
            ("attachment; filename=\"plain.txt\"; filename*=UTF-8''%FF", "http://h/url.txt", "plain.txt"),
            ("attachment; filename*=UTF-8''..%2F..%2Fetc%2Fpasswd", "http://h/x", "_.._etc_passwd"),
            ("attachment; filename*=UTF-8''a%00b", "http://h/x", "a_b"),
            ("attachment; filename=\"..\"", "http://h/file.bin", "file.bin"),
            ("attachment; filename=\"a\"; filename=\"b\"", "http://h/file.bin", "file.bin"),
            ("inline", "http://h/page.html", "page.html"),
            ("garbage=", "http://h/page.html", "page.html"),
            ("attachment; filename=\"...\"", "http://h/", "h"),
        ] as [(String?, String, String)])
    func chooses(_ contentDisposition: String?, _ address: String, _ expected: String) throws {
        let url = try #require(URL(string: address))
        #expect(SuggestedFilename.choose(contentDisposition: contentDisposition, url: url) == expected)
    }

    @Test(
        "A taken name gets the first free browser-style number",
        arguments: [
            ("name.ext", [], "name.ext"),
            ("name.ext", ["name.ext"], "name (1).ext"),
            ("name.ext", ["name.ext", "name (1).ext", "name (2).ext"], "name (3).ext"),
            ("archive.tar.gz", ["archive.tar.gz"], "archive.tar (1).gz"),
            ("README", ["README"], "README (1)"),
            (".profile", [".profile"], ".profile (1)"),
            ("name.ext", ["name (1).ext"], "name.ext"),
        ] as [(String, Set<String>, String)])
    func available(_ name: String, _ taken: Set<String>, _ expected: String) {
        #expect(SuggestedFilename.available(name, exists: { taken.contains($0) }) == expected)
    }

    @Test("A numbered name stays within the length limit")
    func availableKeepsLength() {
        let name = String(repeating: "é", count: 98) + ".pdf"
        let result = SuggestedFilename.available(name, exists: { $0 == name })
        #expect(result.hasSuffix(" (1).pdf"))
        #expect(result.utf8.count <= SuggestedFilename.maximumUTF8Length)
        #expect(result.hasPrefix("ééé"))
    }

    @Test("A directory where every number is taken still yields a new name")
    func availableGivesUp() {
        // "name.ext" and every "name (N).ext" exist. A plain check, not a regular expression: it runs for every
        // number tried, and a debug build's regex engine would keep a thread of the shared pool busy for seconds.
        func taken(_ candidate: String) -> Bool {
            if candidate == "name.ext" { return true }
            guard candidate.hasPrefix("name ("), candidate.hasSuffix(").ext") else { return false }
            let number = candidate.dropFirst("name (".count).dropLast(").ext".count)
            return !number.isEmpty && number.allSatisfy { $0.isASCII && $0.isNumber }
        }
        let result = SuggestedFilename.available("name.ext", exists: taken)
        #expect(result.hasPrefix("name ("))
        #expect(result.hasSuffix(").ext"))
        #expect(!taken(result))
    }

    /// A small deterministic pseudo-random generator (SplitMix64) so that generated inputs are reproducible.
    private struct SplitMix64 {
        private var state: UInt64

        init(seed: UInt64) { state = seed }

        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }
}
