/// A subcommand of `resumable`: its spec, how it reads its arguments, and what it does.
protocol CLICommand {
    /// Name, documentation and arguments.
    static var spec: CommandSpec { get }
    /// Validates the parsed arguments.
    init(arguments: ParsedArguments) throws(UsageError)
    /// Does the work and returns the exit status.
    func run() async -> ExitCode
}
