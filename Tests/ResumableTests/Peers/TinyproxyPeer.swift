import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A private tinyproxy for one test: a foreground process (`-d`) with its own configuration and log in a temporary
/// directory, listening on a free port of 127.0.0.1 and admitting only 127.0.0.1.
///
/// It adds `Via: 1.1 <viaName> (tinyproxy/…)` to every request it forwards, so a test can tell from the origin's
/// recorded requests that a request went through it; ``log()`` has what it did (`Request (file descriptor N): GET
/// http://…`, `CONNECT` lines).
///
/// ```swift
/// let proxy = try await TinyproxyPeer(basicAuth: ("alice", "secret"))
/// defer { proxy.stop() }
/// configuration.proxy = .url(proxy.url, credentials: .init(user: "alice", password: "secret"))
/// ```
final class TinyproxyPeer: Sendable {
    /// The tinyproxy binary: `RESUMABLE_TEST_TINYPROXY`, else `/usr/bin/tinyproxy` (Debian's `tinyproxy`) or the like.
    static let executable = PeerEnvironment.executable(
        named: "tinyproxy",
        overriddenBy: "RESUMABLE_TEST_TINYPROXY",
        candidates: [
            "/usr/bin/tinyproxy", "/usr/sbin/tinyproxy", "/usr/local/bin/tinyproxy", "/opt/homebrew/bin/tinyproxy",
        ]
    )

    /// Whether tests against tinyproxy run: when it is installed, and always in CI, where a missing tinyproxy fails.
    static var testsRun: Bool { executable != nil || PeerEnvironment.isCI }

    /// The temporary directory holding everything of this instance.
    let directory: TemporaryDirectory
    /// The name tinyproxy puts in its `Via` header, unique to this instance.
    let viaName: String
    /// The loopback port tinyproxy listens on.
    var port: UInt16 { process.port }
    private let process: PeerProcess
    private let logURL: URL

    /// Writes a configuration and starts tinyproxy.
    ///
    /// - Parameters:
    ///   - basicAuth: A user and password every request must carry (`Proxy-Authorization: Basic`); otherwise 407.
    ///   - connectPorts: The only ports `CONNECT` may open tunnels to; `nil` for any port. An empty list refuses
    ///     every `CONNECT` (tinyproxy then allows only a port no server uses, 1).
    ///   - denyLoopback: Refuse every client (`Deny 127.0.0.1`): the proxy answers 403 to everything.
    /// - Throws: ``PeerError`` when tinyproxy is not installed or does not start.
    init(
        basicAuth: (user: String, password: String)? = nil, connectPorts: [UInt16]? = nil, denyLoopback: Bool = false
    ) async throws {
        guard let executable = Self.executable else {
            throw PeerEnvironment.missing(
                "tinyproxy", variable: "RESUMABLE_TEST_TINYPROXY", install: "apt-get install -y tinyproxy")
        }
        let directory = try TemporaryDirectory()
        let configuration = directory.url.appendingPathComponent("tinyproxy.conf")
        let log = directory.url.appendingPathComponent("tinyproxy.log")
        let nonce = UUID().uuidString.lowercased()
        let viaName = "resumable-test-proxy-\(nonce.prefix(8))"
        // A request for this host is answered by tinyproxy itself (its statistics page), so the readiness probe needs
        // no server behind the proxy, and only this instance answers it.
        let statHost = "probe-\(nonce).invalid"
        var lines = [
            "Listen 127.0.0.1",
            "Timeout 600",
            "LogFile \(Self.quoted(log.path))",
            "LogLevel Info",
            "MaxClients 100",
            "StatHost \(Self.quoted(statHost))",
            "ViaProxyName \(Self.quoted(viaName))",
        ]
        lines.append(denyLoopback ? "Deny 127.0.0.1" : "Allow 127.0.0.1")
        if let basicAuth {
            lines.append("BasicAuth \(basicAuth.user) \(basicAuth.password)")
        }
        if let connectPorts {
            for port in connectPorts.isEmpty ? [1] : connectPorts {
                lines.append("ConnectPort \(port)")
            }
        }
        let probe: @Sendable (UInt16) -> Bool = { port in
            // A denying or authenticating proxy answers the probe with 403 or 407: then the log says it is up.
            if PeerProcess.get(path: "http://\(statHost)/", port: port) != nil { return true }
            let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            return (denyLoopback || basicAuth != nil) && text.contains("listening on fd")
                && Self.connects(port: port)
        }
        process = try await PeerProcess.launch(
            name: "tinyproxy",
            executable: executable,
            documentRoot: directory.url,
            output: directory.url.appendingPathComponent("output.log"),
            logs: [log, configuration],
            probe: probe,
            directory: directory
        ) { port in
            let text = (["Port \(port)"] + lines).joined(separator: "\n") + "\n"
            try Data(text.utf8).write(to: configuration)
            return ["-d", "-c", configuration.path]
        }
        self.directory = directory
        self.viaName = viaName
        self.logURL = log
    }

    /// The proxy's URL, `http://127.0.0.1:port`.
    var url: URL {
        URL(string: "http://127.0.0.1:\(port)")!
    }

    /// tinyproxy's log so far.
    func log() -> String {
        (try? String(contentsOf: logURL, encoding: .utf8)) ?? ""
    }

    /// The log, after waiting (up to ``Waiting/deadline``) until it contains `text`.
    func log(waitingFor text: String) async throws -> String {
        let deadline = ContinuousClock.now + Waiting.deadline
        while true {
            let log = log()
            if log.contains(text) || ContinuousClock.now >= deadline { return log }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Stops tinyproxy and reaps it. Later calls do nothing.
    func stop(signal: Int32 = SIGTERM) {
        process.stop(signal: signal)
    }

    /// tinyproxy's output, log and configuration, for failure messages.
    func diagnostics() -> String {
        process.diagnostics()
    }

    /// Whether a TCP connection to the port opens.
    private static func connects(port: UInt16) -> Bool {
        #if canImport(Glibc)
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
            let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    /// A string for tinyproxy's configuration.
    private static func quoted(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\"", with: "") + "\""
    }
}
