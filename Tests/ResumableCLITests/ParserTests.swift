import Foundation
import Testing

@testable import Resumable
@testable import ResumableCLI

/// The argument parser and output formatting, tested in-process.
@Suite("argument parsing and formatting")
struct ParserTests {
    private static let spec = CommandSpec(
        name: "test", abstract: "A test command.",
        arguments: [
            .positional("first", help: "First."),
            .positional("second", optional: true, help: "Second."),
            .option("output", short: "o", value: "path", help: "Output."),
            .repeatable("header", short: "H", value: "header", help: "Header."),
            .flag("quiet", short: "q", help: "Quiet."),
        ])

    private func parse(_ arguments: [String]) throws -> ParsedArguments {
        guard case .arguments(let parsed) = try ArgumentParser.parse(arguments, for: Self.spec) else {
            throw UsageError("help")
        }
        return parsed
    }

    @Test("Options, repeatable options, flags and positionals are read in any order")
    func mixedArguments() throws {
        let parsed = try parse(["-H", "a: 1", "one", "--output=out", "-q", "--header", "b: 2", "two"])
        #expect(parsed.positional("first") == "one")
        #expect(parsed.positional("second") == "two")
        #expect(parsed.value("output") == "out")
        #expect(parsed.values("header") == ["a: 1", "b: 2"])
        #expect(parsed.flag("quiet"))
    }

    @Test("'--' makes everything after it positional, and '-' alone is a positional")
    func terminator() throws {
        let parsed = try parse(["-", "--", "--quiet"])
        #expect(parsed.positional("first") == "-")
        #expect(parsed.positional("second") == "--quiet")
        #expect(!parsed.flag("quiet"))
    }

    @Test("Help is recognized anywhere before '--' and nowhere after it")
    func help() throws {
        #expect(throws: Never.self) {
            guard case .help = try ArgumentParser.parse(["x", "--bogus", "-h"], for: Self.spec) else {
                Issue.record("expected help")
                return
            }
        }
        #expect(try parse(["x", "--", "--help"]).positional("second") == "--help")
    }

    @Test(
        "Usage errors name the argument at fault",
        arguments: [
            (["one", "--bogus"], "unknown option '--bogus'"),
            (["one", "-x"], "unknown option '-x'"),
            (["one", "-o"], "option '-o' needs a value <path>"),
            (["one", "-o", "--quiet"], "option '-o' needs a value <path>"),
            (["one", "-o", "a", "--output", "b"], "option '--output' may be given only once"),
            (["one", "--quiet=1"], "flag '--quiet' does not take a value"),
            (["one", "two", "three"], "unexpected argument 'three'"),
            ([], "missing argument <first>"),
        ])
    func usageErrors(arguments: [String], message: String) {
        #expect(throws: UsageError(message)) { try ArgumentParser.parse(arguments, for: Self.spec) }
    }

    @Test("Typed option values are validated")
    func typedValues() throws {
        var parsed = ParsedArguments()
        parsed.options = ["n": ["12"], "rate": ["16M"], "bad": ["1.5k"], "time": ["0.25"]]
        #expect(try parsed.integer("n", in: 0...20) == 12)
        #expect(throws: UsageError.self) { try parsed.integer("n", in: 0...10) }
        #expect(try parsed.byteRate("rate") == 16 << 20)
        #expect(throws: UsageError.self) { try parsed.byteRate("bad") }
        #expect(try parsed.seconds("time") == .milliseconds(250))
        #expect(try parsed.integer("absent", in: 0...1) == nil)
    }

    @Test("Every command's help lists its arguments and fits in 100 columns")
    func helpText() {
        for command in ResumableCommand.commands {
            let text = HelpFormatter.help(for: command.spec)
            #expect(text.contains("USAGE: resumable \(command.spec.name)"))
            for argument in command.spec.arguments {
                #expect(text.contains(argument.displayName))
            }
            for line in text.split(separator: "\n") {
                #expect(line.count <= 100, "\(command.spec.name): \(line)")
            }
        }
    }

    @Test("Exit statuses follow the documented mapping")
    func exitStatuses() {
        #expect(ExitCode.forSignal(SIGINT) == .interrupted)
        #expect(ExitCode.forSignal(SIGTERM) == .terminated)
        #expect(
            [ExitCode.success, .failure, .usage, .dataError, .temporaryFailure, .interrupted, .terminated].map(
                \.rawValue) == [0, 1, 64, 65, 75, 130, 143])
    }

    @Test("Sizes, percentages and the progress bar read well and never claim 100% early")
    func formatting() {
        #expect(ByteFormat.size(512) == "512 B")
        #expect(ByteFormat.size(1536) == "1.5 KiB")
        #expect(ByteFormat.size(32 << 20) == "32.0 MiB")
        #expect(ByteFormat.percent(999, of: 1000) == "99%")
        #expect(ByteFormat.precisePercent(100_000, of: 262_144) == "38.1%")
        #expect(ByteFormat.duration(.seconds(3723)) == "1:02:03")
        #expect(ByteFormat.shellQuoted("/tmp/a b'c") == "'/tmp/a b'\\''c'")
        #expect(ByteFormat.shellQuoted("/tmp/plain.json") == "/tmp/plain.json")
        let progress = DownloadProgress(
            bytesOnDisk: 12 << 20, expectedLength: 32 << 20, resumedAtOffset: 0, bytesTransferred: 12 << 20,
            bytesPerSecond: Double(4 << 20))
        let line = ProgressRenderer.barLine(progress, width: 100)
        #expect(line.hasPrefix(" 37% ["))
        #expect(line.contains("12.0 MiB / 32.0 MiB  4.0 MiB/s  ETA 0:05"))
        #expect(line.count < 100)
        #expect(ProgressRenderer.barLine(progress, width: 40).count < 40)
        #expect(ProgressRenderer.plainLine(progress) == "12.0 MiB of 32.0 MiB (37%) at 4.0 MiB/s")
    }

    @Test("JSON lines escape what they must and keep their key order")
    func jsonLines() throws {
        let value = JSONValue.object([
            ("event", .string("x")), ("text", .string("a\"b\\c\nd\u{1}")), ("n", .int(nil)), ("ok", .bool(true)),
        ])
        #expect(value.serialized == #"{"event":"x","text":"a\"b\\c\nd\u0001","n":null,"ok":true}"#)
        let decoded = try jsonObject(value.serialized)
        #expect(decoded["text"] as? String == "a\"b\\c\nd\u{1}")
    }
}
