import Foundation
import Testing

@testable import Resumable
@testable import ResumableCLI

/// Seeded fuzzing of the batch list parser and the batch display: random bytes, mutated lists, huge lines, CRLF,
/// byte order marks and tabs give entries that keep every rule, or an error naming a line; never a trap. The
/// display fits any snapshot into any width without passing a control character through.
///
/// Uses the generator of `Support/HostileValues.swift` (`RESUMABLE_FUZZ_SEED`, `RESUMABLE_FUZZ_CASES`).
@Suite("Batch input list and display fuzz")
struct InputListFuzzTests {
    private static let digest = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

    /// Lines a list is built from: valid ones, near misses and hostile ones.
    private static let seedLines = [
        "http://example.com/a.iso", "https://h:8080/dir/file?x=1", "  out=file.img", "\tout=b.bin",
        "  sha256=\(digest)", "\tchecksum=sha-256=\(digest.uppercased())", "# comment", "", "   ", "\u{FEFF}",
        "http://a/x\thttp://b/x", "  dir=/tmp", "  out=../x", "  out=.", "out=x", "ftp://h/x", "  checksum=md5=00",
        "  out=日本語.txt", "http://h/\u{1B}[2J", "  out", "  =", "http://h/a b", "  out=x.resumable.json",
    ]

    @Test("Random and mutated lists parse to valid entries or to an error naming a line")
    func parser() async {
        await FuzzCampaign(target: "cli.inputList", cases: FuzzSettings.cases(share: 0.02)).run { values, fuzzCase in
            var bytes: [UInt8]
            switch values.below(40) {
            case 0..<13:
                bytes = values.bytes(maximumCount: 256)
            case 13..<26:
                var text = values.chance(0.2) ? "\u{FEFF}" : ""
                for _ in 0..<(1 + values.below(12)) {
                    let line = values.chance(0.8) ? values.pick(Self.seedLines) : values.string()
                    text += line + (values.chance(0.3) ? "\r\n" : "\n")
                }
                bytes = values.mutateBytes(Array(text.utf8))
            case 26..<39:
                var text = ""
                for _ in 0..<(1 + values.below(12)) {
                    text += values.pick(Self.seedLines) + values.pick(["\n", "\r\n", "\r", "\t\n", " \n"])
                }
                bytes = Array(text.utf8)
            default:
                // One huge line: a URL, an option or junk of up to 256 KiB (the parser is linear; a megabyte takes a
                // second unoptimized, so huge lines are rare here).
                let piece = values.pick(["a", "/", "\t", " ", "=", "é", "\u{0}", "%"])
                let huge = String(repeating: piece, count: 1 + values.below(1 << 18))
                let line = values.pick(["http://h/" + huge, "  out=" + huge, "  " + huge + "=1", huge])
                bytes = Array(("http://h/first\n" + line + "\n").utf8)
            }
            let lineCount = bytes.split(separator: 0x0A, omittingEmptySubsequences: false).count
            do {
                let entries = try InputList.parse(bytes: bytes)
                Self.check(entries, lineCount: lineCount, in: &fuzzCase)
                // Written back as a list, the entries read the same.
                let again = try? InputList.parse(Self.serialized(entries))
                fuzzCase.check(
                    again?.map(\.url) == entries.map(\.url) && again?.map(\.outputName) == entries.map(\.outputName)
                        && again?.map(\.sha256) == entries.map(\.sha256),
                    "round trip of \(entries) gave \(String(describing: again))")
            } catch let error as InputListError {
                fuzzCase.check(
                    error.line.map { (1...lineCount).contains($0) } ?? false,
                    "line \(String(describing: error.line)) of \(lineCount) for \(error.reason)")
                let message = error.message
                fuzzCase.check(
                    !message.unicodeScalars.contains(where: { TerminalText.needsEscape($0) }),
                    "unescaped message \(message.debugDescription)")
                fuzzCase.check(message.count < 1_000, "message of \(message.count) characters")
            } catch {
                fuzzCase.fail("untyped error \(error)")
            }
        }
    }

    @Test("A name is plain exactly when the library's sanitizing keeps it, apart from a token's name")
    func plainNames() async {
        await FuzzCampaign(target: "cli.inputList.names", cases: FuzzSettings.cases(share: 0.02)).run {
            values, fuzzCase in
            let name = values.chance(0.5) ? values.fileName() : values.string()
            let plain = InputList.plainFileNameProblem(name) == nil
            let kept = SuggestedFilename.sanitize(name) == name && !name.lowercased().hasSuffix(".resumable.json")
            fuzzCase.check(plain == kept, "\(name.debugDescription): plain \(plain), kept by sanitize \(kept)")
        }
    }

    @Test("Any snapshot fits any width, every line under it, with no control character from outside")
    func display() async {
        await FuzzCampaign(target: "cli.batchDisplay", cases: FuzzSettings.cases(share: 0.01)).run {
            values, fuzzCase in
            var active: [BatchSnapshot.Download] = []
            for _ in 0..<values.below(6) {
                let state = values.pick([
                    BatchSnapshot.Download.State.connecting, .receiving, .receiving, .verifying,
                    .retrying(attempt: values.int()),
                ])
                active.append(
                    BatchSnapshot.Download(
                        name: values.chance(0.5) ? values.fileName() : values.string(), bytesOnDisk: values.int64(),
                        expectedLength: values.chance(0.7) ? values.int64() : nil, bytesPerSecond: values.double(),
                        state: state))
            }
            let snapshot = BatchSnapshot(
                active: active, filesDone: values.int(), filesFailed: values.int(), filesTotal: values.int(),
                bytesOnDisk: values.int64(), expectedBytes: values.chance(0.5) ? values.int64() : nil,
                bytesPerSecond: values.double(), estimatedTimeRemaining: values.chance(0.5) ? values.duration() : nil)
            let width = values.chance(0.8) ? 1 + values.below(250) : values.int()
            let height = values.chance(0.5) ? nil : values.pick([1, 2, 3, 5, 24, values.int(), .min, .max])
            let lines = BatchProgressDisplay.blockLines(snapshot, width: width, height: height)
            let limit = width > 1 ? width - 1 : 1
            for line in lines {
                fuzzCase.check(
                    DisplayWidth.columns(line) <= limit,
                    "\(line.debugDescription) is wider than \(width) - 1")
                fuzzCase.check(
                    !line.unicodeScalars.contains(where: { TerminalText.needsEscape($0) }),
                    "control character in \(line.debugDescription)")
            }
            // The download lines (at most height - 2, at least one) and the total.
            let most = height.map { $0 > 2 ? $0 - 1 : 2 } ?? BatchProgressDisplay.defaultMaximumDownloadLines + 1
            fuzzCase.check(
                lines.count == min(snapshot.active.count, most - 1) + 1,
                "\(lines.count) lines for \(snapshot.active.count)")
            let event = values.pick([
                BatchEvent.started(name: values.string(), expectedLength: values.int64()),
                .finished(name: values.string(), bytes: values.int64()),
                .failed(name: values.string(), message: values.string()),
            ])
            for line in BatchProgressDisplay.plainLines(for: [event]) + [BatchProgressDisplay.totalLine(snapshot)] {
                fuzzCase.check(
                    !line.unicodeScalars.contains(where: { TerminalText.needsEscape($0) }),
                    "control character in \(line.debugDescription)")
            }
        }
    }

    private static func check(_ entries: [InputList.Entry], lineCount: Int, in fuzzCase: inout FuzzCase) {
        var previous = 0
        var names = Set<String>()
        for entry in entries {
            fuzzCase.check(HTTPURL.isSupported(entry.url), "unsupported URL \(entry.url)")
            fuzzCase.check(entry.line > previous && entry.line <= lineCount, "line \(entry.line) after \(previous)")
            previous = entry.line
            if let name = entry.outputName {
                fuzzCase.check(InputList.plainFileNameProblem(name) == nil, "out=\(name.debugDescription)")
                fuzzCase.check(SuggestedFilename.sanitize(name) == name, "out=\(name.debugDescription) not sanitized")
                fuzzCase.check(names.insert(name.lowercased()).inserted, "duplicate out=\(name.debugDescription)")
            }
            if let sha256 = entry.sha256 {
                fuzzCase.check(SHA256Digest.isLowercaseHex(sha256), "sha256 \(sha256.debugDescription)")
            }
        }
    }

    private static func serialized(_ entries: [InputList.Entry]) -> String {
        var text = ""
        for entry in entries {
            text += entry.url.absoluteString + "\n"
            if let name = entry.outputName { text += "  out=\(name)\n" }
            if let sha256 = entry.sha256 { text += "\tsha256=\(sha256)\n" }
        }
        return text
    }
}
