import Foundation
import Testing

/// `--help` for every command, and command lines that must be refused with exit status 64.
@Suite("help and usage errors")
struct HelpAndUsageTests {
    @Test(
        "--help, -h and 'help <command>' print the command's usage and exit with 0",
        arguments: [
            "get", "resume", "inspect", "serve", "demo",
        ])
    func commandHelp(command: String) async throws {
        let scratch = try ScratchDirectory()
        for arguments in [[command, "--help"], [command, "-h"], ["help", command], [command, "x", "-h", "--bogus"]] {
            let result = try await CLIProcess.run(arguments, in: scratch.url)
            #expect(result.exitCode == 0, "\(arguments): \(result)")
            #expect(result.stdout.contains("USAGE: resumable \(command)"))
            #expect(result.stdout.contains("-h, --help"))
            #expect(result.stderr.isEmpty)
        }
    }

    @Test("The tool's own --help lists every command and exit status")
    func rootHelp() async throws {
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(["--help"], in: scratch.url)
        #expect(result.exitCode == 0)
        for word in ["get", "resume", "inspect", "serve", "demo", "64", "65", "75", "130", "143"] {
            #expect(result.stdout.contains(word))
        }
    }

    @Test(
        "A wrong command line exits with 64 and shows the usage on stderr",
        arguments: [
            [], ["frobnicate"], ["help", "frobnicate"], ["get"], ["get", "ftp://example.com/x"],
            ["get", "not a url"], ["get", "http://127.0.0.1:9/x", "--bogus"], ["get", "http://127.0.0.1:9/x", "extra"],
            ["get", "http://127.0.0.1:9/x", "-o"], ["get", "http://127.0.0.1:9/x", "--retries", "many"],
            ["get", "http://127.0.0.1:9/x", "--retries", "-1"], ["get", "http://127.0.0.1:9/x", "--sha256", "abc"],
            ["get", "http://127.0.0.1:9/x", "-H", "NoColon"], ["get", "http://127.0.0.1:9/x", "-H", "Bad(Name): x"],
            ["get", "http://127.0.0.1:9/x", "--timeout", "0"],
            ["get", "http://127.0.0.1:9/x", "--quiet=yes"], ["get", "http://127.0.0.1:9/x", "-o", "a", "-o", "b"],
            ["get", "http://127.0.0.1:9/x", "--token", "/"], ["resume"], ["resume", "t.json", "--url", "file:///x"],
            ["inspect"], ["inspect", "a", "b"], ["serve"], ["serve", "/nonexistent-directory"],
            ["serve", ".", "--host", "0.0.0.0"], ["serve", ".", "--host", "192.168.1.1"],
            ["serve", ".", "--port", "70000"], ["serve", ".", "--throttle", "fast"], ["demo", "--keep=yes"],
            ["demo", "extra"],
        ])
    func usageErrors(arguments: [String]) async throws {
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(arguments, in: scratch.url)
        #expect(result.exitCode == 64, "\(arguments): \(result)")
        #expect(result.stderr.hasPrefix("error: "), "\(arguments): \(result)")
        #expect(result.stderr.contains("USAGE: resumable"))
        #expect(result.stdout.isEmpty)
        #expect(scratch.contents().isEmpty)
    }

    @Test("'--' ends the options, so a file named like an option can be given")
    func terminator() async throws {
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(["inspect", "--", "--help"], in: scratch.url)
        #expect(result.exitCode == 65, "the file '--help' does not exist: \(result)")
        #expect(result.stderr.contains("--help"))
    }
}
