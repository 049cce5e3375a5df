import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Attacks on proxy routing: hosts curl reads as another spelling of an address the bypass list names, and proxy
/// strings from the environment that carry a NUL, which libcurl (a C library) cuts short.
@Suite("Proxy, TLS and rate limit attacks")
struct ProxyTLSRateAttackTests {
    // MARK: - The bypass list and IPv4 numbers in other spellings

    /// URLs whose host curl's URL parser normalizes to 127.0.0.1 (`ipv4_normalize`: `127.1`, one 32-bit number,
    /// hexadecimal parts), so curl itself compares `127.0.0.1` with the bypass list and goes directly:
    /// `no_proxy=127.0.0.0/8 http_proxy=… curl http://127.1:7/` connects to 127.0.0.1:7, not to the proxy.
    static let otherSpellingsOfLoopback = ["127.1", "2130706433", "0x7f.1", "127.0.1"]

    @Test(
        "A bypass list naming 127.0.0.0/8 (or 127.0.0.1) sends 127.1 and 2130706433 directly, as curl does",
        arguments: otherSpellingsOfLoopback)
    func numericSpellingsAreBypassed(host: String) throws {
        let url = URL(string: "http://\(host):8080/file.bin")!
        let proxy = DownloadTask.Proxy.url(URL(string: "http://127.0.0.1:3128")!)
        for list in ["127.0.0.0/8", "127.0.0.1"] {
            let route = try ProxyRules(environment: [:]).route(for: url, proxy: proxy.bypassing(list))
            #expect(route.proxy == nil, "\(host) with the bypass list \(list): \(route)")
            let environment = ["http_proxy": "http://127.0.0.1:3128", "no_proxy": list]
            let fromEnvironment = try ProxyRules(environment: environment).route(for: url, proxy: .environment)
            #expect(fromEnvironment.proxy == nil, "\(host) with no_proxy=\(list): \(fromEnvironment)")
        }
    }

    @Test(
        "libcurl: a request for http://127.1 with a bypass list of 127.0.0.0/8 never reaches the proxy, nor its Authorization header"
    )
    func numericSpellingNeverReachesTheProxy() async throws {
        let secret = "Bearer origin-secret-\(UUID().uuidString.prefix(8))"
        // A stand-in proxy: any request it sees (an absolute-form GET) is recorded, with its headers.
        let proxyServer = try LoopbackServer()
        let fixture = try DownloadFixture()
        let content = testBytes(count: 20_000)
        fixture.serve(.bytes(content))
        var configuration = DownloadFixture.configuration(
            retries: 0, headers: ["Authorization": secret], transport: .libcurl)
        configuration.proxy = DownloadTask.Proxy.url(URL(string: "http://127.0.0.1:\(proxyServer.port)")!)
            .bypassing("127.0.0.0/8")
        let url = URL(string: "http://127.1:\(fixture.server.port)/file.bin")!
        let task = try DownloadTask(
            url: url, destination: .directory(fixture.directory.url), configuration: configuration)
        let outcome: Result<DownloadResult, any Error>
        do { outcome = .success(try await task.value) } catch { outcome = .failure(error) }
        let leaked = proxyServer.requests.filter { $0.header("Authorization") == secret }
        #expect(proxyServer.requests.isEmpty, "the proxy saw \(proxyServer.requests.map(\.target))")
        #expect(leaked.isEmpty, "the origin's Authorization header reached the proxy the bypass list excludes")
        #expect(fixture.server.requests(for: "/file.bin").count == 1, "\(outcome)")
        if case .success(let result) = outcome {
            try expectSameBytes(fixture.contents(of: result.fileURL), content)
        }
    }

    // MARK: - NUL characters in a proxy string from the environment

    /// `validate()` refuses a NUL in an explicit proxy's host or credentials ("libcurl takes C strings: a NUL would
    /// silently cut a host or credential short, and reach another one"). The environment's proxy strings reach the
    /// same C strings and must be refused the same way, not cut short.
    static let proxyStringsWithNUL = [
        // The host is cut to 127.0.0.1, and with it the port: curl is told `http://127.0.0.1`, so port 1080.
        "http://alice:pw@127.0.0.1%00.proxy.example:3128",
        "127.0.0.1%00.proxy.example:3128",
        // The password is cut to "right".
        "http://alice:right%00wrong@127.0.0.1:3128",
        "http://al%00ice:pw@127.0.0.1:3128",
    ]

    @Test(
        "A NUL in the environment's proxy host or credentials is refused with .proxy, as validate() refuses it for an explicit proxy",
        arguments: proxyStringsWithNUL)
    func environmentProxyWithNUL(value: String) throws {
        let url = URL(string: "http://example.com/file.bin")!
        for variable in ["http_proxy", "all_proxy"] {
            let rules = ProxyRules(environment: [variable: value])
            do {
                let route = try rules.route(for: url, proxy: .environment)
                let host = route.proxy?.host ?? ""
                let user = route.proxy?.credentials?.user ?? ""
                let password = route.proxy?.credentials?.password ?? ""
                let credentials = "\(user):\(password)"
                Issue.record(
                    "\(variable) with a NUL became a route; libcurl would be told \(host.debugDescription), credentials \(credentials.debugDescription)"
                )
            } catch {
                #expect(error.code == .proxy, "\(error)")
                #expect(!error.message.contains("pw") && !error.message.contains("right"), "\(error)")
            }
        }
        // The same string given explicitly is refused at once, before anything is sent.
        let explicit = DownloadTask.Proxy.commandLine(value)
        #expect(throws: ResumableError.self) { try explicit.validate() }
    }
}
