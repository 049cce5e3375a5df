import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `python3 -m http.server --bind 127.0.0.1 PORT --directory DIR` for one test: a real server with no range
/// support at all (no `Accept-Ranges`, no `ETag`, a `200` of the whole file whatever the request says).
///
/// Its request log (one line per request on standard error) is in ``requestLog()``.
final class PythonHTTPServerPeer: Sendable {
    /// One request as the server logged it: `"GET /file.bin HTTP/1.1" 200 -`.
    struct LoggedRequest: Hashable, Sendable {
        var method: String
        var path: String
        var status: Int
    }

    /// The interpreter: `RESUMABLE_TEST_PYTHON3`, else `/usr/bin/python3` (Debian's `python3`), else `python3`
    /// on `PATH`.
    static let executable = PeerEnvironment.executable(
        named: "python3",
        overriddenBy: "RESUMABLE_TEST_PYTHON3",
        candidates: ["/usr/bin/python3", "/usr/local/bin/python3", "/opt/homebrew/bin/python3"]
    )

    /// Whether tests against python3 run: when it is installed, and always in CI, where a missing one fails.
    static var testsRun: Bool { executable != nil || PeerEnvironment.isCI }

    /// The temporary directory holding the document root and the log.
    let directory: TemporaryDirectory
    /// The directory served at `/`.
    let documentRoot: URL
    /// The loopback port the server listens on.
    var port: UInt16 { process.port }
    private let process: PeerProcess
    private let logURL: URL

    /// Starts the server on a free loopback port.
    ///
    /// - Throws: ``PeerError`` when python3 is not installed or the server does not start.
    init() async throws {
        guard let executable = Self.executable else {
            throw PeerEnvironment.missing(
                "python3", variable: "RESUMABLE_TEST_PYTHON3", install: "apt-get install -y python3")
        }
        let directory = try TemporaryDirectory()
        let root = directory.url.appendingPathComponent("www", isDirectory: true)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let log = directory.url.appendingPathComponent("server.log")
        process = try await PeerProcess.launch(
            name: "python3 -m http.server",
            executable: executable,
            documentRoot: root,
            output: log,
            directory: directory
        ) { port in
            ["-u", "-m", "http.server", "--bind", "127.0.0.1", String(port), "--directory", root.path]
        }
        self.directory = directory
        self.documentRoot = root
        self.logURL = log
    }

    /// The URL of `path` on this server.
    func url(_ path: String) -> URL {
        URL(string: "http://127.0.0.1:\(port)\(path)")!
    }

    /// Writes a file to serve at `path`, replacing any file there atomically; see ``PeerFiles/write(_:to:in:modified:)``.
    @discardableResult
    func write(_ bytes: Data, to path: String, modified: Date? = nil) throws -> URL {
        try PeerFiles.write(bytes, to: path, in: documentRoot, modified: modified)
    }

    /// The requests the server logged so far, in order (the readiness probe left out).
    ///
    /// The server logs a request when it sends the status line, before the body.
    func requestLog() -> [LoggedRequest] {
        guard let text = try? String(contentsOf: logURL, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line -> LoggedRequest? in
            // 127.0.0.1 - - [30/Nov/2026 04:09:58] "GET /f.bin HTTP/1.1" 200 -
            let quoted = line.split(separator: "\"", omittingEmptySubsequences: false)
            guard quoted.count >= 3 else { return nil }
            let request = quoted[1].split(separator: " ")
            guard request.count == 3, let status = Int(quoted[2].split(separator: " ").first ?? "") else {
                return nil
            }
            return LoggedRequest(method: String(request[0]), path: String(request[1]), status: status)
        }.filter { !$0.path.hasPrefix("/.peer-probe-") }
    }

    /// Stops the server and reaps it. Later calls do nothing.
    func stop(signal: Int32 = SIGTERM) {
        process.stop(signal: signal)
    }

    /// The server's output, for failure messages.
    func diagnostics() -> String {
        process.diagnostics()
    }
}
