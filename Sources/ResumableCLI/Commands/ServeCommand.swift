import Foundation
import LoopbackServer

/// `resumable serve DIR`: serves a directory over HTTP on a loopback address, with range support.
struct ServeCommand: CLICommand {
    static let spec = CommandSpec(
        name: "serve",
        abstract: "Serve a directory over HTTP on 127.0.0.1, with ranges and validators, to try downloads.",
        arguments: [
            .positional("directory", help: "The directory whose files are served."),
            .option(
                "host", value: "address", help: "A loopback address to bind: 127.0.0.1 (default), ::1 or localhost."),
            .option("port", value: "port", help: "The port; 0 (the default) picks a free one."),
            .option(
                "throttle", value: "rate",
                help: "Pace every response at this many bytes per second, e.g. 512k or 16M, so that there is "
                    + "time to interrupt a download."),
            .option(
                "drop-after", value: "bytes",
                help: "Close every connection after sending this many body bytes (e.g. 5M), to test how an "
                    + "application copes with a flaky server."),
        ],
        discussion: """
            Prints the URL of every file it serves on standard output (the first line is the base URL), then \
            serves until SIGINT or SIGTERM, and exits with 0. Only loopback addresses can be bound.
            """
    )

    /// The directory.
    let directory: URL
    /// Where to bind.
    let host: String
    /// The port, 0 for any.
    let port: UInt16
    /// Server-wide pacing in bytes per second.
    let throttle: Int?
    /// Server-wide fault: close each connection after this many body bytes.
    let dropAfter: Int64?
    private static let listedFilesLimit = 200

    init(arguments: ParsedArguments) throws(UsageError) {
        let path = arguments.positional("directory") ?? ""
        var isDirectory: ObjCBool = false
        guard !path.isEmpty, FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory),
            isDirectory.boolValue
        else {
            throw UsageError("<directory> must be an existing directory, not '\(path)'")
        }
        directory = URL(fileURLWithPath: path, isDirectory: true).standardizedFileURL
        let host = arguments.value("host") ?? "127.0.0.1"
        guard Self.isLoopback(host) else {
            throw UsageError("refusing to serve on '\(host)': only loopback addresses (127.0.0.0/8, ::1, localhost)")
        }
        self.host = host
        port = UInt16(try arguments.integer("port", in: 0...65_535) ?? 0)
        throttle = try arguments.byteRate("throttle")
        dropAfter = try arguments.byteRate("drop-after").map(Int64.init)
    }

    /// The server's configuration: the options, and no record of the requests, which a server that runs until
    /// stopped would keep without bound.
    var serverConfiguration: LoopbackServer.Configuration {
        var configuration = LoopbackServer.Configuration(
            host: host, port: port, throttleBytesPerSecond: throttle, dropAfterBytes: dropAfter)
        configuration.recordsRequests = false
        return configuration
    }

    /// Whether `host` names this machine's loopback interface only.
    static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host == "::1" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "127" else { return false }
        return parts.allSatisfy { part in UInt8(part) != nil }
    }

    func run() async -> ExitCode {
        let watcher = SignalWatcher()
        let server: LoopbackServer
        do {
            server = try LoopbackServer(configuration: serverConfiguration)
        } catch {
            Console.err("error: cannot serve on \(host):\(port): \(error)")
            return .failure
        }
        server.serveFiles(from: directory)
        Console.out(server.url(for: "/").absoluteString)
        let files = Self.files(in: directory)
        for (path, size) in files.prefix(Self.listedFilesLimit) {
            Console.out("\(server.url(for: Self.encodedPath(path)).absoluteString)\t\(size)")
        }
        if files.count > Self.listedFilesLimit {
            Console.err("… and \(files.count - Self.listedFilesLimit) more files")
        }
        var note = "Serving \(directory.path) on \(server.baseURL.absoluteString)"
        if let throttle { note += " at \(ByteFormat.rate(Double(throttle)))" }
        if let dropAfter { note += ", dropping each connection after \(ByteFormat.size(dropAfter))" }
        Console.err(note + ". Press Ctrl-C to stop.")
        let signal = await watcher.next()
        server.shutdown()
        withExtendedLifetime(watcher) {}
        Console.err("Stopped (\(signal.map(SignalWatcher.name(of:)) ?? "done")).")
        return .success
    }

    /// `/a%20b/c%23d.bin` for `a b/c#d.bin`: every character outside the unreserved set and a few safe ones is
    /// percent-encoded, so that `#`, `?` and `%` in file names cannot change the URL's meaning.
    static func encodedPath(_ relativePath: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~!$&'()*+,;=:@")
        return relativePath.split(separator: "/", omittingEmptySubsequences: false)
            .map { String($0).addingPercentEncoding(withAllowedCharacters: allowed) ?? String($0) }
            .reduce("") { $0 + "/" + $1 }
    }

    /// The regular files under `directory` that `serve` serves, as relative paths with sizes, sorted: hidden ones
    /// (a segment starting with `.`, also where a symbolic link leads) are skipped, as the server refuses them.
    static func files(in directory: URL) -> [(String, Int64)] {
        let keys: [URLResourceKey] = [.isRegularFileKey, .fileSizeKey]
        guard
            let enumerator = FileManager.default.enumerator(
                at: directory, includingPropertiesForKeys: keys, options: [.skipsHiddenFiles])
        else { return [] }
        let root = directory.standardizedFileURL.resolvingSymlinksInPath().path
        var files: [(String, Int64)] = []
        for case let url as URL in enumerator {
            guard let values = try? url.resourceValues(forKeys: Set(keys)), values.isRegularFile == true else {
                continue
            }
            let path = url.standardizedFileURL.resolvingSymlinksInPath().path
            // Byte for byte: `hasPrefix` holds canonically equivalent names (`é`, `e` + U+0301) equal, which are
            // two directories.
            guard path.utf8.starts(with: (root + "/").utf8) else { continue }
            let relative = String(decoding: path.utf8.dropFirst(root.utf8.count + 1), as: UTF8.self)
            // The server's rule: a file reached through a hidden segment (a link into `.resumable-state`) is not
            // served, so it is not listed either.
            guard !StaticFileResolver.isHidden(relativePath: relative) else { continue }
            files.append((relative, Int64(values.fileSize ?? 0)))
        }
        return files.sorted { $0.0 < $1.0 }
    }
}
