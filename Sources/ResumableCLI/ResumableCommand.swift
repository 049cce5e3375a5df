import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The `resumable` tool: finds the subcommand, parses its arguments, runs it, exits with its status.
@main
struct ResumableCommand {
    /// Every subcommand, in the order `--help` lists them.
    static var commands: [any CLICommand.Type] {
        [
            GetCommand.self, ResumeCommand.self, ListCommand.self, InspectCommand.self, ServeCommand.self,
            DemoCommand.self,
        ]
    }

    static func main() async {
        // A closed pipe on standard output should end the output, not kill the process mid-pause.
        signal(SIGPIPE, SIG_IGN)
        // A file-size limit (ulimit -f) then fails writes with EFBIG, reported as a full disk, instead of a kill.
        signal(SIGXFSZ, SIG_IGN)
        let status = await run(Array(CommandLine.arguments.dropFirst()))
        status.exit()
    }

    /// Runs the tool with `arguments` (without the tool's name) and returns the exit status.
    static func run(_ arguments: [String]) async -> ExitCode {
        guard let name = arguments.first else {
            Console.err(HelpFormatter.usageError(UsageError("missing command"), for: nil))
            return .usage
        }
        if name == "--help" || name == "-h" {
            Console.out(RootHelp.text(commands: commands.map { $0.spec }))
            return .success
        }
        if name == "help" {
            guard let topic = arguments.dropFirst().first else {
                Console.out(RootHelp.text(commands: commands.map { $0.spec }))
                return .success
            }
            guard let command = command(named: topic) else {
                Console.err(HelpFormatter.usageError(UsageError("unknown command '\(topic)'"), for: nil))
                return .usage
            }
            Console.out(HelpFormatter.help(for: command.spec))
            return .success
        }
        guard let command = command(named: name) else {
            Console.err(HelpFormatter.usageError(UsageError("unknown command '\(name)'"), for: nil))
            return .usage
        }
        return await run(command, Array(arguments.dropFirst()))
    }

    private static func command(named name: String) -> (any CLICommand.Type)? {
        commands.first { $0.spec.name == name }
    }

    private static func run(_ command: any CLICommand.Type, _ arguments: [String]) async -> ExitCode {
        let instance: any CLICommand
        do {
            switch try ArgumentParser.parse(arguments, for: command.spec) {
            case .help:
                Console.out(HelpFormatter.help(for: command.spec))
                return .success
            case .arguments(let parsed):
                instance = try command.init(arguments: parsed)
            }
        } catch {
            Console.err(HelpFormatter.usageError(error, for: command.spec))
            return .usage
        }
        return await instance.run()
    }
}

/// The top-level help: what the tool is and which commands it has.
enum RootHelp {
    /// `USAGE: resumable <command> [options]`.
    static let usage = "USAGE: resumable <command> [<arguments>] [<options>]"

    /// The text of `resumable --help`.
    static func text(commands: [CommandSpec]) -> String {
        var lines = [
            "OVERVIEW: HTTP downloads that survive pause, network loss, killed processes and hand-offs between "
                + "processes.",
            "",
            usage,
            "",
            "COMMANDS:",
        ]
        for command in commands {
            lines.append("  " + command.name.padding(toLength: 10, withPad: " ", startingAt: 0) + command.abstract)
        }
        lines += [
            "",
            "See 'resumable <command> --help' (or 'resumable help <command>') for a command's options.",
            "",
            "EXIT STATUS:",
            "  0    success",
            "  1    permanent failure (HTTP error status, checksum mismatch, file system error)",
            "  64   usage error",
            "  65   unusable resume token (malformed, newer version, or its download is gone)",
            "  75   transient failure after the retries, or the token is in use by another process",
            "  130  interrupted by SIGINT (a resume token was kept when there was data)",
            "  143  terminated by SIGTERM (a resume token was kept when there was data)",
        ]
        return lines.joined(separator: "\n")
    }
}
