import Foundation
import Resumable

/// `resumable get URL`: downloads a URL, keeping a resume token beside it until the file is complete.
struct GetCommand: CLICommand {
    static let spec = CommandSpec(
        name: "get",
        abstract: "Download a URL; an interrupted download leaves a resume token.",
        arguments: [
            .positional("url", help: "The http or https URL to download."),
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

    /// The URL to download.
    let url: URL
    /// Where the finished file goes.
    let destination: DownloadTask.Destination
    /// `--token`, when given.
    let tokenURL: URL?
    /// The shared options.
    let options: DownloadOptions

    init(arguments: ParsedArguments) throws(UsageError) {
        url = try Self.httpURL(arguments.positional("url") ?? "", option: "<url>")
        destination = try Self.destination(for: arguments.value("output"))
        tokenURL = try Self.tokenFile(arguments.value("token"))
        options = try DownloadOptions(arguments)
    }

    func run() async -> ExitCode {
        let renderer = ProgressRenderer(mode: options.outputMode)
        // A password in the URL is sent, never shown.
        renderer.note("Downloading \(HTTPURL.removingUserInfo(url).absoluteString)")
        let runner = DownloadRunner(options: options, tokenFile: TokenFile(url: tokenURL), renderer: renderer)
        return await runner.run { configuration throws(ResumableError) in
            try DownloadTask(url: url, destination: destination, configuration: configuration)
        }
    }

    /// An absolute http or https URL with a host, or a usage error naming `option`.
    static func httpURL(_ text: String, option: String) throws(UsageError) -> URL {
        guard let url = URL(string: text), HTTPURL.isSupported(url) else {
            throw UsageError("\(option) must be an http or https URL, not '\(text)'")
        }
        return url
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
