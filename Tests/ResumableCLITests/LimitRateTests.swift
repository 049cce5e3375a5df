import Foundation
import LoopbackServer
import Testing

@testable import Resumable
@testable import ResumableCLI

/// `--limit-rate` on `get` and `resume`: curl's syntax, refusals with exit status 64, and a limited download.
@Suite("--limit-rate")
struct LimitRateTests {
    static func options(_ command: CommandSpec, _ arguments: [String]) throws -> DownloadOptions {
        guard case .arguments(let parsed) = try ArgumentParser.parse(arguments, for: command) else {
            throw UsageError("help")
        }
        return try DownloadOptions(parsed)
    }

    static let acceptedRates: [(String, Int)] = [
        ("1", 1), ("500000", 500_000), ("512k", 512 << 10), ("512K", 512 << 10), ("2M", 2 << 20),
        ("2m", 2 << 20), ("1G", 1 << 30), ("3g", 3 << 30), ("007", 7),
        ("9223372036854775807", Int.max), ("8589934591G", 8_589_934_591 << 30),
    ]

    @Test("Rates in bytes per second with k, m, g as powers of 1024", arguments: acceptedRates)
    func accepted(text: String, rate: Int) throws {
        for command in [GetCommand.spec, ResumeCommand.spec] {
            let options = try Self.options(command, ["x", "--limit-rate", text])
            #expect(options.limitRate == rate)
            let configuration = options.configuration(checkpointing: .file(URL(fileURLWithPath: "/dev/null")))
            #expect(configuration.rateLimiters.map(\.bytesPerSecond) == [rate])
        }
        let unlimited = try Self.options(GetCommand.spec, ["x"])
        #expect(unlimited.limitRate == nil)
        #expect(unlimited.configuration(checkpointing: .file(URL(fileURLWithPath: "/dev/null"))).rateLimiters.isEmpty)
    }

    @Test(
        "Zero, signs, fractions, other suffixes, spaces and overflow are usage errors",
        arguments: [
            "0", "0k", "-1", "-2M", "+5", "1.5M", "2MB", "2Mb", "2T", "k", "M", "", " 2M", "2M ", "2 M", "0x10",
            "9223372036854775808", "9223372036854775807k", "8589934592G", "99999999999999999999999", "１２",
        ])
    func refused(text: String) {
        #expect(throws: UsageError.self) { try Self.options(GetCommand.spec, ["x", "--limit-rate", text]) }
    }

    @Test(
        "get and resume refuse a bad rate with exit status 64",
        arguments: [["get", "http://127.0.0.1:9/x"], ["resume", "t.json"]])
    func exitStatus(command: [String]) async throws {
        for rate in ["0", "-1", "fast", "99999999999999999999G"] {
            let scratch = try ScratchDirectory()
            let result = try await CLIProcess.run(command + ["--limit-rate", rate], in: scratch.url)
            #expect(result.exitCode == 64, "\(rate): \(result)")
            #expect(result.stderr.contains("--limit-rate"), "\(result)")
            #expect(scratch.contents().isEmpty)
        }
    }

    @Test("The help of get and resume describes --limit-rate")
    func help() {
        for command in [GetCommand.spec, ResumeCommand.spec] {
            let text = HelpFormatter.help(for: command)
            #expect(text.contains("--limit-rate <rate>"))
            #expect(text.contains("512k"))
        }
    }

    @Test("get --limit-rate downloads the exact bytes, no faster than the limit")
    func limitedDownload() async throws {
        let served = try ServedFile(length: 600_000)
        let scratch = try ScratchDirectory()
        let clock = ContinuousClock()
        let start = clock.now
        let result = try await CLIProcess.run(["get", served.url, "--limit-rate", "256k", "-q"], in: scratch.url)
        let elapsed = clock.now - start
        #expect(result.exitCode == 0, "\(result)")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
        // 600 kB at 256 KiB/s with a 16 KiB burst: at least 2.22 s.
        #expect(elapsed >= .milliseconds(2_220), "\(elapsed)")
    }
}
