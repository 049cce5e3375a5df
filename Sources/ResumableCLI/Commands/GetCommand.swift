import Foundation
import Resumable

/// `resumable get URL`: downloads a URL, keeping a resume token beside it until the file is complete.
struct GetCommand: CLICommand {
    static let spec = CommandSpec(
        name: "get",
        abstract: "Download a URL; an interrupted download leaves a resume token.",
        arguments: [
            .positional("url", optional: true, help: "The http or https URL to download (not with -i)."),
            .option(
                "input-file", short: "i", value: "list",
                help: "Download every URL of this list ('-': standard input), aria2 style: one URL per line, "
                    + "optionally followed by indented 'out=NAME' and 'sha256=HEX' lines. The files go into the "
                    + "directory of -o (default: the current directory)."),
            .option(
                "jobs", short: "j", value: "n", help: "With -i: how many downloads run at once, 1 to 64. Default: 4."),
            .option(
                "state", value: "dir",
                help: "With -i: the task store that keeps the batch across interruptions and crashes. "
                    + "Default: '<output directory>/.resumable-state'. Continue with 'resumable resume --state DIR'."),
            .option(
                "output", short: "o", value: "path",
                help: "Where the file goes. An existing directory, or a path ending in '/', keeps the server's "
                    + "file name; any other path is the exact file. Default: the current directory."),
            .option(
                "token", value: "file",
                help: "Where to keep the resume token. Default: beside the destination, named "
                    + "'<file name>.resumable.json'."),
        ] + DownloadOptions.arguments,
        discussion: """
            The download streams into a hidden temporary file next to the destination ('.resumable-<uuid>.partial') \
            and is moved into place only when complete. While data arrives, the resume token is saved about once \
            a second, so even a killed process can be continued. On SIGINT or SIGTERM the download pauses, the \
            token is written, and the exit status is 130 or 143. Continue with 'resumable resume <token file>'. \
            On success the file's path is printed on standard output and the token is removed.
            """
    )

    /// The URL to download; `nil` with `-i`.
    let url: URL?
    /// `-i`: the list file, `-` for standard input.
    let inputList: String?
    /// `-j`.
    let jobs: Int
    /// `--state`, or the default beside the output.
    let stateDirectory: URL?
    /// With `-i`: the directory of `-o`.
    let outputDirectory: URL?
    /// Where the finished file goes.
    let destination: DownloadTask.Destination
    /// `--token`, when given.
    let tokenURL: URL?
    /// The shared options.
    let options: DownloadOptions

    init(arguments: ParsedArguments) throws(UsageError) {
        inputList = arguments.value("input-file")
        jobs = try Self.jobs(arguments.value("jobs"))
        if let inputList {
            guard arguments.positional("url") == nil else {
                throw UsageError("give either a URL or -i LIST, not both")
            }
            guard !inputList.isEmpty else { throw UsageError("option '--input-file' needs a file path or '-'") }
            // Each download of a list keeps its token in the state directory: one token file cannot serve them.
            guard arguments.value("token") == nil else {
                throw UsageError("with -i, each download's token is kept in --state: no --token")
            }
            url = nil
            let output = arguments.value("output") ?? FileManager.default.currentDirectoryPath
            var isDirectory: ObjCBool = false
            if output.isEmpty
                || (FileManager.default.fileExists(atPath: output, isDirectory: &isDirectory) && !isDirectory.boolValue)
            {
                throw UsageError("with -i, -o must be a directory (it is created when missing)")
            }
            let directory = URL(fileURLWithPath: output, isDirectory: true)
            outputDirectory = directory
            destination = .directory(directory)
            let state =
                arguments.value("state").map { URL(fileURLWithPath: $0, isDirectory: true) }
                ?? BatchRunner.defaultStateDirectory(output: output)
            // The library's rule, checked before anything is created: a file downloaded into the store could replace
            // one of the store's own (its lock, a record).
            if TaskStore.directory(state, holds: .directory(directory)) {
                throw UsageError(
                    "the output directory '\(output)' is the state directory or lies inside it; choose another -o or "
                        + "--state")
            }
            stateDirectory = state
        } else {
            guard arguments.value("jobs") == nil, arguments.value("state") == nil else {
                throw UsageError("options '--jobs' and '--state' need -i LIST")
            }
            url = try Self.httpURL(arguments.positional("url") ?? "", option: "<url>")
            destination = try Self.destination(for: arguments.value("output"))
            stateDirectory = nil
            outputDirectory = nil
        }
        tokenURL = try Self.tokenFile(arguments.value("token"))
        options = try DownloadOptions(arguments)
    }

    /// `-j`: 1 to 64, 4 by default.
    static func jobs(_ text: String?) throws(UsageError) -> Int {
        guard let text else { return 4 }
        guard let jobs = Int(text), (1...64).contains(jobs) else {
            throw UsageError("option '--jobs' takes a number from 1 to 64, not '\(text)'")
        }
        return jobs
    }

    func run() async -> ExitCode {
        if let inputList, let stateDirectory, let outputDirectory {
            return await runList(inputList, state: stateDirectory, into: outputDirectory)
        }
        guard let url else { return .usage }
        let renderer = ProgressRenderer(mode: options.outputMode)
        // A password in the URL is sent, never shown.
        renderer.note("Downloading \(HTTPURL.removingUserInfo(url).absoluteString)")
        let runner = DownloadRunner(options: options, tokenFile: TokenFile(url: tokenURL), renderer: renderer)
        return await runner.run { configuration throws(ResumableError) in
            try DownloadTask(url: url, destination: destination, configuration: configuration)
        }
    }

    private func runList(_ path: String, state: URL, into directory: URL) async -> ExitCode {
        let entries: [InputList.Entry]
        do {
            entries = try InputList.read(path: path)
        } catch {
            Console.err("error: \(path): \(error.message)")
            return .dataError
        }
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            Console.err("error: cannot create the output directory \(directory.path): \(error.localizedDescription)")
            return .failure
        }
        let store: TaskStore
        do {
            store = try TaskStore(directory: state)
        } catch {
            Console.err("error: \(error.message)")
            return ExitCode.forError(error)
        }
        return await BatchRunner(options: options, jobs: jobs, store: store).runList(entries, into: directory)
    }

    /// An absolute http or https URL with a host, or a usage error naming `option`.
    static func httpURL(_ text: String, option: String) throws(UsageError) -> URL {
        guard let url = URL(string: text) else {
            throw UsageError("\(option) must be an http or https URL, not '\(HTTPURL.excerpt(text))'")
        }
        switch HTTPURL.problem(with: url) {
        case .notHTTP: throw UsageError("\(option) must be an http or https URL, not '\(HTTPURL.excerpt(text))'")
        case .tooLong(let bytes): throw UsageError("\(option): \(HTTPURL.Problem.tooLong(bytes: bytes))")
        case nil: return url
        }
    }

    /// `-o`: an existing directory or a path ending in `/` is a directory; anything else is the exact file.
    static func destination(for path: String?) throws(UsageError) -> DownloadTask.Destination {
        guard let path else { return .currentDirectory }
        guard !path.isEmpty else { throw UsageError("option '--output' needs a path") }
        return .path(path)
    }

    /// `--token`: a file path that is not a directory.
    static func tokenFile(_ path: String?) throws(UsageError) -> URL? {
        guard let path else { return nil }
        var isDirectory: ObjCBool = false
        if path.isEmpty || path.hasSuffix("/")
            || (FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue)
        {
            throw UsageError("option '--token' needs a file path, not a directory: '\(path)'")
        }
        return URL(fileURLWithPath: path, isDirectory: false)
    }
}
