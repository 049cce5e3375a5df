import Foundation
import LoopbackServer
import ProcessSpawning

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A private nginx for one test: a single foreground process (`daemon off; master_process off;`) whose
/// configuration, pid file, lock file, logs and temporary paths all live in its own temporary directory,
/// listening on a free port of 127.0.0.1 and serving ``documentRoot``.
///
/// The access log is JSON lines recording what the tests assert on: the status, the `Range` and `If-Range`
/// each request carried, and the body bytes sent (see ``accessLog()``).
///
/// ```swift
/// let nginx = try await NginxPeer(serverDirectives: "location /slow/ { limit_rate_after 64k; limit_rate 1; }")
/// defer { nginx.stop() }
/// try nginx.write(bytes, to: "/slow/file.bin")
/// ```
final class NginxPeer: Sendable {
    /// One line of the access log.
    struct AccessLogEntry: Decodable, Hashable, Sendable {
        var status: Int
        var uri: String
        /// The request's `Range`, or `""`.
        var range: String
        /// The request's `If-Range`, or `""`.
        var ifRange: String
        /// Body bytes sent (for a request the client dropped, what was sent before).
        var sent: Int64
    }

    /// TLS for an instance: the certificate it presents on its TLS port, whether it offers HTTP/2 there (ALPN), and
    /// whether it requires a client certificate.
    struct TLS: Sendable {
        /// The certificate and key nginx presents.
        var identity: TLSCertificates.Identity
        /// Whether nginx offers HTTP/2 (`listen … ssl http2`); otherwise it speaks HTTP/1.1 only.
        var http2: Bool = true
        /// A CA whose client certificates nginx requires (`ssl_verify_client on`); `nil` for none. nginx completes
        /// the handshake without one and answers `400` ("No required SSL certificate was sent").
        var clientCA: URL? = nil

        init(_ identity: TLSCertificates.Identity, http2: Bool = true, clientCA: URL? = nil) {
            self.identity = identity
            self.http2 = http2
            self.clientCA = clientCA
        }
    }

    /// The protocol of one logged request (`$server_protocol`: `HTTP/1.1`, `HTTP/2.0`), with what identifies it.
    struct ProtocolLogEntry: Decodable, Hashable, Sendable {
        var status: Int
        var uri: String
        /// The request's `Range`, or `""`.
        var range: String
        /// `HTTP/1.1` or `HTTP/2.0`.
        var `protocol`: String
    }

    /// The nginx binary: `RESUMABLE_TEST_NGINX`, else `/usr/sbin/nginx` (Debian's `nginx-light`) or the like.
    static let executable = PeerEnvironment.executable(
        named: "nginx",
        overriddenBy: "RESUMABLE_TEST_NGINX",
        candidates: ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/bin/nginx", "/opt/homebrew/bin/nginx"]
    )

    /// Whether tests against nginx run: when it is installed, and always in CI, where a missing nginx fails.
    static var testsRun: Bool { executable != nil || PeerEnvironment.isCI }

    /// The temporary directory holding everything of this instance: the nginx prefix.
    let directory: TemporaryDirectory
    /// The directory served at `/`.
    let documentRoot: URL
    /// The loopback port nginx listens on.
    var port: UInt16 { process.port }
    /// The loopback port nginx speaks TLS on, when it was started with ``TLS``; ``port`` then still speaks plain
    /// HTTP (the readiness probe uses it), serving the same files.
    let tlsPort: UInt16?
    private let process: PeerProcess
    private let accessLogURL: URL

    /// Writes a configuration and starts nginx.
    ///
    /// - Parameters:
    ///   - httpDirectives: Extra directives for the `http` block (e.g. a `map`).
    ///   - serverDirectives: Extra directives for the `server` block (e.g. `location`s with `limit_rate`).
    ///   - documentRoot: A directory to serve; by default a new one inside this instance's directory. Pass
    ///     another instance's to serve the same files (same inodes, so the same `ETag`s) from a new process.
    ///   - tls: Also listen on ``tlsPort`` with TLS (and HTTP/2, unless turned off); ``url(_:)`` then names it.
    /// - Throws: ``PeerError`` when nginx is not installed or does not start.
    init(
        httpDirectives: String = "", serverDirectives: String = "", documentRoot: URL? = nil, tls: TLS? = nil
    ) async throws {
        guard let executable = Self.executable else {
            throw PeerEnvironment.missing(
                "nginx", variable: "RESUMABLE_TEST_NGINX", install: "apt-get install -y nginx-light")
        }
        let directory = try TemporaryDirectory()
        let root = documentRoot ?? directory.url.appendingPathComponent("www", isDirectory: true)
        let logs = directory.url.appendingPathComponent("logs", isDirectory: true)
        let temporary = directory.url.appendingPathComponent("temp", isDirectory: true)
        for path in [root, logs, temporary] {
            try FileManager.default.createDirectory(at: path, withIntermediateDirectories: true)
        }
        let configuration = directory.url.appendingPathComponent("nginx.conf")
        let errorLog = logs.appendingPathComponent("error.log")
        let accessLog = logs.appendingPathComponent("access.log")
        let modules = Self.temporaryPathModules
        var tlsPort: UInt16?
        process = try await PeerProcess.launch(
            name: "nginx",
            executable: executable,
            documentRoot: root,
            output: logs.appendingPathComponent("output.log"),
            logs: [errorLog, configuration],
            directory: directory
        ) { port in
            let temporaryPaths = modules.map { module in
                "\(module)_temp_path \(Self.quoted(temporary.appendingPathComponent(module).path));"
            }
            var tlsDirectives = ""
            if let tls {
                // A second free port; a clash with another process shows as "address already in use" and the launch
                // is tried again with new ports.
                var second = try PeerProcess.freeLoopbackPort()
                while second == port { second = try PeerProcess.freeLoopbackPort() }
                tlsPort = second
                tlsDirectives = """
                    listen 127.0.0.1:\(second) ssl\(tls.http2 ? " http2" : "");
                            ssl_certificate \(Self.quoted(tls.identity.certificate.path));
                            ssl_certificate_key \(Self.quoted(tls.identity.key.path));
                    """
                if let clientCA = tls.clientCA {
                    tlsDirectives += """

                                ssl_client_certificate \(Self.quoted(clientCA.path));
                                ssl_verify_client on;
                        """
                }
            }
            let text = """
                daemon off;
                master_process off;
                pid \(Self.quoted(directory.url.appendingPathComponent("nginx.pid").path));
                lock_file \(Self.quoted(directory.url.appendingPathComponent("nginx.lock").path));
                error_log \(Self.quoted(errorLog.path)) info;
                events { worker_connections 256; }
                http {
                    log_format resumable escape=json '{"status":$status,"uri":"$uri","range":"$http_range",'
                        '"ifRange":"$http_if_range","sent":$body_bytes_sent,"protocol":"$server_protocol"}';
                    access_log \(Self.quoted(accessLog.path)) resumable;
                    \(temporaryPaths.joined(separator: "\n    "))
                    default_type application/octet-stream;
                    sendfile on;
                    keepalive_timeout 10s;
                    \(httpDirectives)
                    server {
                        listen 127.0.0.1:\(port);
                        \(tlsDirectives)
                        server_name localhost;
                        root \(Self.quoted(root.path));
                        \(serverDirectives)
                    }
                }

                """
            try Data(text.utf8).write(to: configuration)
            // -e: the error log before the configuration is read (the built-in path is outside the prefix).
            return ["-p", directory.url.path + "/", "-c", configuration.path, "-e", errorLog.path]
        }
        self.directory = directory
        self.documentRoot = root
        self.accessLogURL = accessLog
        self.tlsPort = tlsPort
    }

    /// The URL of `path` on this instance: `https` on ``tlsPort`` when it has one, else `http` on ``port``.
    func url(_ path: String) -> URL {
        url(path, host: "127.0.0.1")
    }

    /// The URL of `path` on this instance under another name for loopback (`localhost`, `[::1]`).
    func url(_ path: String, host: String) -> URL {
        if let tlsPort { return URL(string: "https://\(host):\(tlsPort)\(path)")! }
        return URL(string: "http://\(host):\(port)\(path)")!
    }

    /// The plain `http` URL of `path` on ``port``, also when the instance speaks TLS on ``tlsPort``.
    func plainURL(_ path: String) -> URL {
        URL(string: "http://127.0.0.1:\(port)\(path)")!
    }

    /// Writes a file to serve at `path`, replacing any file there atomically; see ``PeerFiles/write(_:to:in:modified:)``.
    @discardableResult
    func write(_ bytes: Data, to path: String, modified: Date? = nil) throws -> URL {
        try PeerFiles.write(bytes, to: path, in: documentRoot, modified: modified)
    }

    /// Every request logged so far, in the order nginx finished them (the readiness probe left out).
    ///
    /// nginx logs a request when it ends, so a request the client dropped may appear after later ones.
    func accessLog() -> [AccessLogEntry] {
        guard let text = try? String(contentsOf: accessLogURL, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            try? JSONDecoder().decode(AccessLogEntry.self, from: Data(line.utf8))
        }.filter { !$0.uri.hasPrefix("/.peer-probe-") }
    }

    /// The protocol of every request for `uri` logged so far, in the order nginx finished them.
    func protocolLog(for uri: String) -> [ProtocolLogEntry] {
        guard let text = try? String(contentsOf: accessLogURL, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            try? JSONDecoder().decode(ProtocolLogEntry.self, from: Data(line.utf8))
        }.filter { $0.uri == uri }
    }

    /// The requests for `uri` logged so far, after waiting (up to ``Waiting/deadline``) until `condition` holds
    /// for them.
    func accessLog(
        for uri: String, waitingUntil condition: ([AccessLogEntry]) -> Bool = { _ in true }
    ) async throws -> [AccessLogEntry] {
        let deadline = ContinuousClock.now + Waiting.deadline
        while true {
            let entries = accessLog().filter { $0.uri == uri }
            if condition(entries) || ContinuousClock.now >= deadline { return entries }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Stops nginx (SIGTERM: a fast shutdown; SIGKILL: a crash) and reaps it. Later calls do nothing.
    func stop(signal: Int32 = SIGTERM) {
        process.stop(signal: signal)
    }

    /// nginx's output, error log and configuration, for failure messages.
    func diagnostics() -> String {
        process.diagnostics()
    }

    /// A string literal for nginx's configuration language.
    private static func quoted(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    /// The modules with a `*_temp_path` directive that this nginx was built with (`nginx -V` lists the ones
    /// left out), so that every temporary path lands in the prefix and the configuration stays valid.
    private static let temporaryPathModules: [String] = {
        let all = ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"]
        guard let executable else { return all }
        // nginx -V prints to standard error.
        let pipe = Pipe()
        guard
            let process = try? SpawnedProcess(
                executable: executable, arguments: ["-V"], standardInput: .nullDevice, standardOutput: .pipe(pipe),
                standardError: .pipe(pipe))
        else { return all }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let flags = String(decoding: data, as: UTF8.self)
        return all.filter { module in
            module == "client_body" || !flags.contains("--without-http_\(module)_module")
        }
    }()
}
