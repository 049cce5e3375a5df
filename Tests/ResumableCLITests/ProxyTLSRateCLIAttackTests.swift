import Foundation
import LoopbackServer
import Testing

/// Attacks on the proxy settings the `resumable` binary reads from its environment: a proxy password must never
/// appear in what the binary prints (`--json` events, messages, batch summaries) nor reach a proxy the environment
/// never named.
@Suite("Proxy, TLS and rate limit attacks (CLI)")
struct ProxyTLSRateCLIAttackTests {
    /// Every proxy variable curl reads, empty (curl counts an empty one as unset), so the test process's own
    /// settings play no part; then `variables` on top.
    static func environment(_ variables: [String: String]) -> [String: String] {
        var environment: [String: String] = [:]
        for name in ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"] {
            environment[name] = ""
        }
        return environment.merging(variables) { $1 }
    }

    /// Whether any file under `directory` holds `secret`.
    static func filesHolding(_ secret: String, under directory: URL) -> [String] {
        let enumerator = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)
        var found: [String] = []
        while let url = enumerator?.nextObject() as? URL {
            if let data = try? Data(contentsOf: url), String(decoding: data, as: UTF8.self).contains(secret) {
                found.append(url.lastPathComponent)
            }
        }
        return found
    }

    @Test(
        "URLSession: a proxy password in http_proxy never appears in --json events, messages or a batch's output, even when libcurl cannot parse the proxy's host"
    )
    func urlSessionProxyPasswordNeverPrinted() async throws {
        let secret = "pw-\(UUID().uuidString.prefix(8))"
        let server = try LoopbackServer()
        server.register(.bytes(Array(repeating: 7, count: 1000)), at: "/file.bin")
        let url = server.url(for: "/file.bin").absoluteString
        // `!` is a valid host character for Foundation's URL parser (a sub-delim), so the proxy string is accepted
        // and the request goes out; libcurl 7.88 refuses the host and writes "Unsupported proxy syntax in '<the
        // whole proxy string>'" into its error buffer, which FoundationNetworking passes on as the description.
        let environment = Self.environment(["http_proxy": "http://alice:\(secret)@pro!xy:3128"])
        let scratch = try ScratchDirectory()
        var results: [CLIResult] = []
        results.append(
            try await CLIProcess.run(
                ["get", url, "--transport", "urlsession", "--retries", "0", "--json"], in: scratch.url,
                environment: environment))
        results.append(
            try await CLIProcess.run(
                ["get", url, "--transport", "urlsession", "--retries", "0"], in: scratch.url,
                environment: environment))
        try Data("\(url)\n".utf8).write(to: scratch.file("list.txt"))
        results.append(
            try await CLIProcess.run(
                ["get", "-i", "list.txt", "--state", "state", "--transport", "urlsession", "--retries", "0"],
                in: scratch.url, environment: environment))
        for result in results {
            #expect(result.exitCode != 0, "\(result)")
            #expect(!result.stdout.contains(secret), "the proxy password is printed on stdout: \(result)")
            #expect(!result.stderr.contains(secret), "the proxy password is printed on stderr: \(result)")
        }
        let files = Self.filesHolding(secret, under: scratch.url)
        #expect(files.isEmpty, "files holding the proxy password: \(files)")
    }

    @Test(
        "libcurl: http_proxy naming 127.0.0.1%00.proxy.example never sends its credentials to 127.0.0.1:1080, a proxy the environment never named"
    )
    func environmentProxyWithNULIsNotCutShort() async throws {
        let secret = "nul-\(UUID().uuidString.prefix(8))"
        let server = try LoopbackServer()
        server.register(.bytes(Array(repeating: 7, count: 1000)), at: "/file.bin")
        // Cut at the NUL, the proxy string libcurl gets is "http://127.0.0.1": port 1080. A recording server there
        // (when the port is free) shows whether the request, and the credentials, arrive.
        let catcher = try? LoopbackServer(configuration: .init(port: 1080))
        let environment = Self.environment([
            "http_proxy": "http://alice:\(secret)@127.0.0.1%00.proxy.example:3128"
        ])
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(
            ["get", server.url(for: "/file.bin").absoluteString, "--transport", "libcurl", "--retries", "0", "--json"],
            in: scratch.url, environment: environment)
        // As with --proxy (validate()): a typed, permanent .proxy error before anything is sent.
        #expect(result.exitCode == 1, "\(result)")
        #expect(result.stdout.contains(#""code":"proxy""#), "\(result)")
        #expect(!result.stdout.contains("port 1080"), "libcurl was sent to 127.0.0.1:1080: \(result)")
        if let catcher {
            let reached = catcher.requests
            #expect(reached.isEmpty, "a proxy never named received \(reached.map(\.target))")
            let credentials = reached.compactMap { $0.header("Proxy-Authorization") }
            #expect(credentials.isEmpty, "and with it the credentials: \(credentials)")
        }
        #expect(server.requests(for: "/file.bin").isEmpty)
    }
}
