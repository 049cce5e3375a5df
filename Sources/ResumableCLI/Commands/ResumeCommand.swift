import Foundation
import Resumable

/// `resumable resume TOKEN`: continues a download from its token file, in this or any later process.
struct ResumeCommand: CLICommand {
    static let spec = CommandSpec(
        name: "resume",
        abstract: "Continue a download from its resume token file.",
        arguments: [
            .positional(
                "token", optional: true,
                help: "The resume token file that 'get' (or an earlier 'resume') left behind (not with --state)."),
            .option(
                "state", value: "dir",
                help: "Continue every unfinished download of the batch kept in this task store ('get -i')."),
            .option("jobs", short: "j", value: "n", help: "With --state: how many downloads run at once. Default: 4."),
            .option(
                "output", short: "o", value: "path",
                help: "Where the finished file goes, as for 'get'. Needed when the token's temporary file is gone "
                    + "(nothing then proves its destination is yours). Default: the token's destination."),
            .option(
                "url", value: "url",
                help: "A new URL for the same content (signed URLs expire); the token's validators still guard it."),
        ] + DownloadOptions.arguments,
        discussion: """
            The token is read and checked first: an unreadable, invalid or newer-version token, or one whose \
            download already finished, exits with 65 and touches nothing. A token's destination is used only when \
            its temporary file is present and yours (this library's naming, one link, your user, in that \
            directory); otherwise pass -o PATH, or it exits with 65. --overwrite applies only to a destination \
            given with -o. A token whose temporary file is held by \
            a running download exits with 75. Otherwise the download continues with a range request from the \
            token's offset, saving the token to the same file as it goes; on success the token file is removed. \
            SIGINT and SIGTERM pause it again (exit 130 or 143).
            """
    )

    /// The token file; `nil` with `--state`.
    let tokenURL: URL?
    /// `--state`.
    let stateDirectory: URL?
    /// `-j`.
    let jobs: Int
    /// `--url`, when given.
    let replacementURL: URL?
    /// `-o`, when given.
    let destination: DownloadTask.Destination?
    /// The shared options.
    let options: DownloadOptions

    init(arguments: ParsedArguments) throws(UsageError) {
        stateDirectory = arguments.value("state").map { URL(fileURLWithPath: $0, isDirectory: true) }
        jobs = try GetCommand.jobs(arguments.value("jobs"))
        if stateDirectory != nil {
            // Each download keeps the URL, destination and checksum its list gave it: none is given again here.
            guard arguments.positional("token") == nil, arguments.value("url") == nil,
                arguments.value("output") == nil, arguments.value("sha256") == nil
            else { throw UsageError("--state resumes a whole batch: no token, --url, -o or --sha256 with it") }
            tokenURL = nil
        } else {
            let path = arguments.positional("token") ?? ""
            guard !path.isEmpty else { throw UsageError("missing argument <token>") }
            guard arguments.value("jobs") == nil else { throw UsageError("option '--jobs' needs --state DIR") }
            tokenURL = URL(fileURLWithPath: path, isDirectory: false)
        }
        replacementURL = try arguments.value("url").map { (text) throws(UsageError) in
            try GetCommand.httpURL(text, option: "option '--url'")
        }
        destination = try arguments.value("output").map { (path) throws(UsageError) in
            try GetCommand.destination(for: path)
        }
        options = try DownloadOptions(arguments)
    }

    func run() async -> ExitCode {
        if let stateDirectory {
            guard FileManager.default.fileExists(atPath: stateDirectory.appendingPathComponent("tasks").path) else {
                Console.err("error: \(stateDirectory.path) is not the state directory of a batch")
                return .dataError
            }
            let store: TaskStore
            do {
                store = try TaskStore(directory: stateDirectory)
            } catch {
                Console.err("error: \(error.message)")
                return ExitCode.forError(error)
            }
            return await BatchRunner(options: options, jobs: jobs, store: store).runStore()
        }
        guard let tokenURL else { return .usage }
        let renderer = ProgressRenderer(mode: options.outputMode)
        let token: ResumeToken
        do {
            token = try ResumeToken(contentsOf: tokenURL)
        } catch {
            let runner = DownloadRunner(options: options, tokenFile: TokenFile(url: nil), renderer: renderer)
            return runner.reportFailure(error, leftToken: nil)
        }
        renderer.note("Resuming \((replacementURL ?? token.url).absoluteString)")
        let tokenFile = TokenFile(url: tokenURL, knownToken: token)
        let runner = DownloadRunner(options: options, tokenFile: tokenFile, renderer: renderer)
        let (replacementURL, destination) = (self.replacementURL, self.destination)
        return await runner.run { configuration throws(ResumableError) in
            try DownloadTask.resume(
                from: token, destination: destination, replacingURL: replacementURL, configuration: configuration)
        }
    }
}
