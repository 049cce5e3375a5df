import Foundation
import Testing

@testable import Resumable
@testable import ResumableCLI

/// Seeded fuzzing of the CLI's converters of outside data: the human-readable formatting of offsets, lengths,
/// rates and delays that come from tokens and servers, the JSON events, and the option parsing of `--timeout`,
/// `--retries` and the rest. Each returns text, a value or a `UsageError`; none traps.
///
/// The generator is the one of `Tests/ResumableTests/Support/HostileValues.swift` (this target's
/// `Support/HostileValues.swift` is a symbolic link to it). This suite runs an eighth of `RESUMABLE_FUZZ_CASES`
/// (default 100,000, so 12,500 here) from `RESUMABLE_FUZZ_SEED`.
@Suite("Hostile input fuzz (CLI)")
struct CLIHostileInputFuzzTests {
    /// This suite's part of the cases: an eighth of what the library's suite runs.
    private static func cases(share: Double) -> Int {
        FuzzSettings.cases(share: share / 8)
    }

    @Test("ByteFormat: any Int64, Double or Duration formats without trapping, within its documented range")
    func byteFormat() async {
        await FuzzCampaign(target: "cli.byteFormat", cases: Self.cases(share: 0.5)).run { values, fuzzCase in
            let done = values.int64()
            let total = values.int64()
            let percent = ByteFormat.percent(done, of: total)
            let precise = ByteFormat.precisePercent(done, of: total)
            fuzzCase.check(
                Int(percent.dropLast()).map { (0...100).contains($0) } == true && percent.hasSuffix("%"),
                "percent(\(done), of: \(total)) gave \(percent)")
            fuzzCase.check(
                Double(precise.dropLast()).map { (0...100).contains($0) } == true,
                "precisePercent(\(done), of: \(total)) gave \(precise)")
            if total > 0, done >= 0, done <= total {
                // The exact value, computed where nothing overflows.
                let expected = Int64((Double(done) / Double(total) * 100).rounded(.down))
                let got = Int64(percent.dropLast()) ?? -1
                fuzzCase.check(abs(got - expected) <= 1, "percent(\(done), of: \(total)) gave \(percent)")
                fuzzCase.check(got < 100 || done == total, "percent(\(done), of: \(total)) claims 100% early")
            }

            let size = ByteFormat.size(values.int64())
            fuzzCase.check(!size.isEmpty && size.hasSuffix("B"), "size gave \(size)")
            let rateInput = values.double()
            let rate = ByteFormat.rate(rateInput)
            fuzzCase.check(rate == "-" || rate.hasSuffix("/s"), "rate(\(rateInput)) gave \(rate)")

            let number = values.double()
            let whole = ByteFormat.wholeNumber(number)
            if number.isFinite, number > -0x1p63, number < 0x1p63 {
                fuzzCase.check(whole == Int64(number), "wholeNumber(\(number)) gave \(whole)")
            }

            let duration = values.duration()
            let clock = ByteFormat.duration(duration)
            fuzzCase.check(clock.contains(":") && !clock.hasPrefix("-"), "duration(\(duration)) gave \(clock)")
            let seconds = ByteFormat.seconds(duration)
            fuzzCase.check(seconds.hasSuffix(" s"), "seconds(\(duration)) gave \(seconds)")
            let milliseconds = ByteFormat.milliseconds(duration)
            if duration > .milliseconds(Int64.min), duration < .milliseconds(Int64.max) {
                // Truncated toward zero: between zero and the duration, less than a millisecond from it.
                let back = Duration.milliseconds(milliseconds)
                let between = duration >= .zero ? back >= .zero && back <= duration : back <= .zero && back >= duration
                fuzzCase.check(
                    between && (duration - back < .milliseconds(1)) && (back - duration < .milliseconds(1)),
                    "milliseconds(\(duration)) gave \(milliseconds)")
            }
            let wholeSeconds = ByteFormat.wholeSeconds(duration)
            if duration > .seconds(Int64.min), duration < .seconds(Int64.max) {
                fuzzCase.check(wholeSeconds == duration.components.seconds, "wholeSeconds(\(duration))")
            }

            let path = values.chance(0.3) ? values.fileName() : values.string()
            let quoted = ByteFormat.shellQuoted(path)
            fuzzCase.check(
                Self.shellWord(quoted) == path, "shellQuoted(\(path.debugDescription)) gave \(quoted.debugDescription)")
        }
    }

    @Test("Options: --timeout, --retries, --sha256, --header, --transport give a value or a UsageError")
    func options() async {
        await FuzzCampaign(target: "cli.options", cases: Self.cases(share: 0.3)).run { values, fuzzCase in
            var parsed = ParsedArguments()
            let timeout = values.chance(0.7) ? values.numberText() : values.string()
            let retries = values.chance(0.7) ? values.numberText() : values.string()
            if values.chance(0.8) { parsed.options["timeout"] = [timeout] }
            if values.chance(0.8) { parsed.options["retries"] = [retries] }
            if values.chance(0.3) { parsed.options["sha256"] = [values.mutate(String(repeating: "ab", count: 32))] }
            if values.chance(0.3) { parsed.options["header"] = [values.headerName() + ":" + values.string()] }
            if values.chance(0.2) { parsed.options["transport"] = [values.string()] }
            do throws(UsageError) {
                let options = try DownloadOptions(parsed)
                if let idleTimeout = options.idleTimeout {
                    fuzzCase.check(
                        idleTimeout > .zero && idleTimeout <= .seconds(86_400),
                        "--timeout \(timeout.debugDescription) gave \(idleTimeout)")
                }
                if let count = options.retries {
                    fuzzCase.check(
                        (0...1000).contains(count), "--retries \(retries.debugDescription) gave \(count)")
                }
                let configuration = options.configuration(checkpointing: .file(URL(fileURLWithPath: "/dev/null")))
                let delay = configuration.retry.delay(attempt: values.int(), serverAsked: nil)
                fuzzCase.check(delay >= .zero && delay <= .seconds(5), "retry delay \(delay)")
            } catch {
                fuzzCase.check(!error.message.isEmpty, "an empty usage error")
            }

            var rate = ParsedArguments()
            let rateText =
                values.numberText() + (values.chance(0.5) ? values.pick(["k", "K", "m", "M", "g", "G", "x"]) : "")
            rate.options["throttle"] = [rateText]
            do throws(UsageError) {
                let bytesPerSecond = try rate.byteRate("throttle")
                fuzzCase.check(
                    bytesPerSecond.map { $0 > 0 && $0 <= Int(Int32.max) } ?? false,
                    "byteRate(\(rateText.debugDescription)) gave \(String(describing: bytesPerSecond))")
            } catch {
                fuzzCase.check(!error.message.isEmpty, "an empty usage error")
            }
        }
    }

    @Test("Command lines: any argument vector for get parses to a command or a UsageError")
    func commandLines() async {
        let words = [
            "--timeout", "--timeout=", "--retries", "--retries=", "-H", "--header", "--sha256", "--transport",
            "--output", "-o", "--token", "--", "-", "--json", "-q", "--quiet", "--overwrite", "--bogus", "-x", "",
        ]
        await FuzzCampaign(target: "cli.commandLines", cases: Self.cases(share: 0.1)).run { values, fuzzCase in
            var arguments: [String] = []
            for _ in 0..<values.below(8) {
                switch values.below(5) {
                case 0, 1: arguments.append(values.pick(words))
                case 2: arguments.append(values.numberText())
                case 3: arguments.append(values.url())
                default: arguments.append(values.pick(words) + values.numberText())
                }
            }
            // `-h` anywhere asks for help; leave it out so that parsing goes all the way.
            arguments.removeAll { $0 == "-h" || $0 == "--help" }
            do throws(UsageError) {
                guard case .arguments(let parsed) = try ArgumentParser.parse(arguments, for: GetCommand.spec) else {
                    return
                }
                // Only the options: GetCommand would look at the file system for --output and --token.
                let options = try DownloadOptions(parsed)
                fuzzCase.check(
                    options.idleTimeout.map { $0 > .zero && $0 <= .seconds(86_400) } ?? true,
                    "\(arguments) gave timeout \(String(describing: options.idleTimeout))")
            } catch {
                fuzzCase.check(!error.message.isEmpty, "\(arguments): an empty usage error")
            }
        }
    }

    @Test("JSON events and progress lines for any delay, rate and attempt")
    func events() async {
        await FuzzCampaign(target: "cli.events", cases: Self.cases(share: 0.1)).run { values, fuzzCase in
            let length = values.nonNegativeInt64()
            let progress = DownloadProgress(
                bytesOnDisk: values.chance(0.5) ? min(values.nonNegativeInt64(), length) : values.nonNegativeInt64(),
                expectedLength: values.chance(0.8) ? length : nil, resumedAtOffset: values.nonNegativeInt64(),
                bytesTransferred: values.nonNegativeInt64(), bytesPerSecond: values.double())
            let error = ResumableError(.network, values.string(), retryAfter: values.duration())
            let delay = values.duration()
            for event in [
                DownloadEvent.progress(progress), .retrying(attempt: values.int(), delay: delay, error: error),
            ] {
                let line = EventJSON.event(event).serialized
                fuzzCase.check(
                    (try? JSONSerialization.jsonObject(with: Data(line.utf8))) != nil,
                    "\(event) gave invalid JSON \(line.debugDescription)")
                _ = ProgressRenderer.describe(event)
            }
            // A terminal's width comes from the kernel as a 16-bit count.
            let width = values.chance(0.8) ? values.below(300) : values.below(65_536)
            let bar = ProgressRenderer.barLine(progress, width: width)
            fuzzCase.check(bar.count <= max(width - 1, 1), "barLine(width: \(width)) gave \(bar.debugDescription)")
            _ = ProgressRenderer.plainLine(progress)
        }
    }

    // MARK: - Regressions

    @Test("Regression: `resumable inspect` formats a token offset of 10^16 (and Int64.max) without trapping")
    func inspectHugeOffset() {
        #expect(ByteFormat.precisePercent(10_000_000_000_000_000, of: 20_000_000_000_000_000) == "50.0%")
        #expect(ByteFormat.precisePercent(10_000_000_000_000_000, of: 10_000_000_000_000_000) == "100.0%")
        #expect(ByteFormat.precisePercent(Int64.max - 1, of: Int64.max) == "99.9%")
        #expect(ByteFormat.percent(Int64.max, of: Int64.max) == "100%")
        #expect(ByteFormat.percent(Int64.max / 2, of: Int64.max) == "49%")
        #expect(ByteFormat.percent(-5, of: 100) == "0%")
        #expect(ByteFormat.precisePercent(Int64.min, of: Int64.max) == "0.0%")
        #expect(ByteFormat.percent(5, of: -1) == "100%")
        #expect(ByteFormat.size(Int64.max) == "8192.0 PiB")
        #expect(ByteFormat.rate(1e30) == "8192.0 PiB/s")
        #expect(ByteFormat.duration(.seconds(Int64.max) * 18) == ByteFormat.duration(.seconds(Int64.max)))
        #expect(ByteFormat.seconds(.seconds(Int64.max) * 18) == "9223372036854775808 s")
        #expect(ByteFormat.milliseconds(.seconds(Int64.max)) == .max)
        #expect(ByteFormat.milliseconds(.seconds(Int64.min)) == .min)
        #expect(ByteFormat.milliseconds(.milliseconds(-1500)) == -1500)
        // The usual values are unchanged.
        #expect(ByteFormat.precisePercent(100_000, of: 262_144) == "38.1%")
        #expect(ByteFormat.percent(999, of: 1000) == "99%")
    }

    @Test("Regression: a quote followed by a combining mark is still escaped in a shell hint")
    func shellQuoteBeforeCombiningMark() {
        // One Character ("'" + U+0301) but two scalars: the quote must still be escaped.
        let path = "/tmp/x'\u{301}; touch pwned; '.json"
        let quoted = ByteFormat.shellQuoted(path)
        #expect(quoted == "'/tmp/x'\\''\u{301}; touch pwned; '\\''.json'")
        #expect(Self.shellWord(quoted) == path)
    }

    // MARK: - Helpers

    /// The word a POSIX shell reads from `text`: single-quoted runs and unquoted characters (with `\` escapes).
    static func shellWord(_ text: String) -> String? {
        var result = ""
        var characters = text.unicodeScalars.makeIterator()
        while let scalar = characters.next() {
            switch scalar {
            case "'":
                var closed = false
                while let inner = characters.next() {
                    if inner == "'" {
                        closed = true
                        break
                    }
                    result.unicodeScalars.append(inner)
                }
                guard closed else { return nil }
            case "\\":
                guard let escaped = characters.next() else { return nil }
                result.unicodeScalars.append(escaped)
            case " ", "\t", "\n", "\"", "$", "`", ";", "&", "|", "<", ">", "(", ")", "*", "?", "[", "#", "~":
                // Would split, expand or redirect when unquoted.
                return nil
            default:
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}
