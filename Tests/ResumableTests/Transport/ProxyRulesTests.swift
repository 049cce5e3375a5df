import Foundation
import Testing

@testable import Resumable

/// curl's proxy rules as ``ProxyRules`` applies them: pure, no network, no process environment.
@Suite("Proxy rules (curl's environment and NO_PROXY rules)")
struct ProxyRulesTests {
    private func route(
        _ url: String, _ environment: [String: String], proxy: DownloadTask.Proxy = .environment,
        dialect: ProxyRules.Dialect = .curl
    ) throws(ResumableError) -> ProxyRoute {
        try ProxyRules(environment: environment).route(for: URL(string: url)!, proxy: proxy, dialect: dialect)
    }

    private func proxyHost(_ url: String, _ environment: [String: String], proxy: DownloadTask.Proxy = .environment)
        throws -> String?
    {
        try route(url, environment, proxy: proxy).proxy.map { "\($0.host):\($0.port)" }
    }

    // MARK: - Which variable

    @Test("http URLs read only the lowercase http_proxy (httpoxy), then all_proxy, ALL_PROXY")
    func httpVariables() throws {
        #expect(try proxyHost("http://example.com/", ["http_proxy": "p1:1"]) == "p1:1")
        #expect(try proxyHost("http://example.com/", ["HTTP_PROXY": "p1:1"]) == nil)
        #expect(try proxyHost("http://example.com/", ["HTTP_PROXY": "p1:1", "all_proxy": "p2:2"]) == "p2:2")
        #expect(try proxyHost("http://example.com/", ["http_proxy": "p1:1", "all_proxy": "p2:2"]) == "p1:1")
        #expect(try proxyHost("http://example.com/", ["ALL_PROXY": "p3:3"]) == "p3:3")
        #expect(try proxyHost("http://example.com/", ["all_proxy": "p2:2", "ALL_PROXY": "p3:3"]) == "p2:2")
        // https_proxy never applies to http.
        #expect(try proxyHost("http://example.com/", ["https_proxy": "p4:4", "HTTPS_PROXY": "p5:5"]) == nil)
    }

    @Test("https URLs read https_proxy, then HTTPS_PROXY, then all_proxy, ALL_PROXY; never http_proxy")
    func httpsVariables() throws {
        #expect(try proxyHost("https://example.com/", ["https_proxy": "p1:1", "HTTPS_PROXY": "p2:2"]) == "p1:1")
        #expect(try proxyHost("https://example.com/", ["HTTPS_PROXY": "p2:2"]) == "p2:2")
        #expect(try proxyHost("https://example.com/", ["HTTPS_PROXY": "p2:2", "all_proxy": "p3:3"]) == "p2:2")
        #expect(try proxyHost("https://example.com/", ["http_proxy": "p4:4"]) == nil)
        #expect(try proxyHost("https://example.com/", ["http_proxy": "p4:4", "ALL_PROXY": "p5:5"]) == "p5:5")
        #expect(try proxyHost("HTTPS://example.com/", ["https_proxy": "p1:1"]) == "p1:1")
    }

    @Test("An empty variable counts as unset, as curl_getenv has it")
    func emptyVariables() throws {
        #expect(try proxyHost("http://example.com/", ["http_proxy": "", "all_proxy": "p2:2"]) == "p2:2")
        #expect(try proxyHost("https://example.com/", ["https_proxy": "", "HTTPS_PROXY": "p2:2"]) == "p2:2")
        #expect(try proxyHost("http://example.com/", ["http_proxy": "p1:1", "no_proxy": "", "NO_PROXY": "*"]) == nil)
        #expect(try proxyHost("http://example.com/", ["http_proxy": ""]) == nil)
    }

    @Test("Nothing set: direct")
    func nothingSet() throws {
        #expect(try route("http://example.com/", [:]).proxy == nil)
        #expect(try route("https://example.com/", ["PATH": "/bin"]).proxy == nil)
    }

    // MARK: - Proxy strings

    @Test("Proxy strings: scheme guessed as http, port 1080 by default, brackets, credentials percent-decoded")
    func proxyStrings() throws {
        let cases: [(String, String, Int, String?, String?)] = [
            ("proxy.example", "proxy.example", 1080, nil, nil),
            ("proxy.example:3128", "proxy.example", 3128, nil, nil),
            ("http://proxy.example:3128/", "proxy.example", 3128, nil, nil),
            ("HTTP://Proxy.Example:8080/ignored/path", "Proxy.Example", 8080, nil, nil),
            ("http://[::1]:3128", "::1", 3128, nil, nil),
            ("[fd00::2]:81", "fd00::2", 81, nil, nil),
            ("http://user:p%40ss%3Aword@proxy:1", "proxy", 1, "user", "p@ss:word"),
            ("us%20er@proxy:2", "proxy", 2, "us er", ""),
            ("http://:secret@proxy:3", "proxy", 3, "", "secret"),
        ]
        for (text, host, port, user, password) in cases {
            let found = try route("http://example.com/", ["http_proxy": text]).proxy
            #expect(found?.host == host, "\(text)")
            #expect(found?.port == port, "\(text)")
            #expect(found?.credentials?.user == user, "\(text)")
            #expect(found?.credentials?.password == password, "\(text)")
        }
    }

    @Test("A proxy variable of another scheme or without a host fails with .proxy, naming the variable, not the value")
    func unusableProxyVariables() {
        for value in [
            "socks5://user:hunter2@proxy:1080", "https://proxy:443", "ftp.example.com:21", "http://", "http://:80",
            "socks5h://hunter2@p",
        ] {
            do throws(ResumableError) {
                _ = try route("https://example.com/", ["https_proxy": value])
                Issue.record("\(value) was accepted")
            } catch {
                #expect(error.code == .proxy, "\(value): \(error)")
                #expect(error.message.contains("https_proxy"), "\(error)")
                #expect(!error.message.contains("hunter2"), "\(error)")
            }
        }
        // A list that bypasses the host means the variable is never read.
        #expect((try? route("https://example.com/", ["https_proxy": "socks5://p", "no_proxy": "example.com"])) != nil)
    }

    // MARK: - Explicit proxies and bypass lists

    @Test(".none goes direct whatever the environment says; .url goes through its proxy")
    func explicitProxies() throws {
        let environment = ["http_proxy": "env:1", "https_proxy": "env:2", "ALL_PROXY": "env:3"]
        #expect(try route("http://example.com/", environment, proxy: .none).proxy == nil)
        #expect(try route("http://example.com/", environment, proxy: .none.bypassing("")).proxy == nil)
        let explicit = DownloadTask.Proxy.url(URL(string: "http://explicit:8080")!)
        #expect(try proxyHost("http://example.com/", environment, proxy: explicit) == "explicit:8080")
        #expect(try proxyHost("https://example.com/", [:], proxy: explicit) == "explicit:8080")
    }

    @Test("NO_PROXY from the environment applies to an explicit proxy too (curl's CURLOPT_PROXY without NOPROXY)")
    func environmentListAppliesToExplicitProxy() throws {
        let explicit = DownloadTask.Proxy.url(URL(string: "http://explicit:8080")!)
        #expect(try proxyHost("http://example.com/", ["NO_PROXY": "example.com"], proxy: explicit) == nil)
        #expect(try proxyHost("http://other.com/", ["NO_PROXY": "example.com"], proxy: explicit) == "explicit:8080")
        // ... unless a list of its own replaces it.
        #expect(
            try proxyHost("http://example.com/", ["NO_PROXY": "example.com"], proxy: explicit.bypassing(""))
                == "explicit:8080")
    }

    @Test("no_proxy is read before NO_PROXY; a bypass list replaces both")
    func listPrecedence() throws {
        let base = ["http_proxy": "p:1"]
        #expect(try proxyHost("http://a.com/", base.merging(["no_proxy": "a.com", "NO_PROXY": "b.com"]) { $1 }) == nil)
        #expect(
            try proxyHost("http://b.com/", base.merging(["no_proxy": "a.com", "NO_PROXY": "b.com"]) { $1 }) == "p:1")
        #expect(try proxyHost("http://b.com/", base.merging(["NO_PROXY": "b.com"]) { $1 }) == nil)
        #expect(
            try proxyHost(
                "http://a.com/", base.merging(["NO_PROXY": "a.com"]) { $1 }, proxy: .environment.bypassing("c.com"))
                == "p:1")
        #expect(try proxyHost("http://c.com/", base, proxy: .environment.bypassing("c.com")) == nil)
        #expect(try proxyHost("http://c.com/", base, proxy: .environment.bypassing("*")) == nil)
        #expect(
            try proxyHost("http://c.com/", base.merging(["NO_PROXY": "*"]) { $1 }, proxy: .environment.bypassing(""))
                == "p:1")
    }

    @Test("No hidden exceptions: loopback hosts go through the proxy unless the list names them")
    func loopbackIsNotSpecial() throws {
        for url in ["http://127.0.0.1:8080/", "http://localhost/", "http://[::1]:80/", "http://a.localhost/"] {
            #expect(try proxyHost(url, ["http_proxy": "p:1"]) == "p:1", "\(url)")
        }
        #expect(try proxyHost("http://127.0.0.1:8080/", ["http_proxy": "p:1", "no_proxy": "127.0.0.1"]) == nil)
        #expect(try proxyHost("http://[::1]:8080/", ["http_proxy": "p:1", "no_proxy": "::1"]) == nil)
        #expect(try proxyHost("http://localhost:8080/", ["http_proxy": "p:1", "no_proxy": "localhost"]) == nil)
    }

    @Test("Each request is decided for its own URL: a redirect to another host is decided again")
    func perRequest() throws {
        let rules = ProxyRules(environment: ["http_proxy": "p:1", "no_proxy": "inside.example"])
        #expect(try rules.route(for: URL(string: "http://outside.example/a")!, proxy: .environment).proxy != nil)
        #expect(try rules.route(for: URL(string: "http://inside.example/b")!, proxy: .environment).proxy == nil)
    }

    // MARK: - The bypass list (Curl_check_noproxy), curl's unit1614 cases

    /// tests/unit/unit1614.c of curl 7.88.1 (the `[::1]` hosts as written there) and of curl 8.x.
    static let unit1614: [(host: String, list: String, match: Bool)] = [
        ("www.example.com", "localhost .example.com .example.de", true),
        ("www.example.com", "localhost,.example.com,.example.de", true),
        ("www.example.com.", "localhost,.example.com,.example.de", true),
        ("example.com", "localhost,.example.com,.example.de", true),
        ("example.com.", "localhost,.example.com,.example.de", true),
        ("www.example.com", "localhost,.example.com.,.example.de", true),
        ("www.example.com", "localhost,www.example.com.,.example.de", true),
        ("example.com", "localhost,example.com,.example.de", true),
        ("example.com.", "localhost,example.com,.example.de", true),
        ("nexample.com", "localhost,example.com,.example.de", false),
        ("www.example.com", "localhost,example.com,.example.de", true),
        ("127.0.0.1", "127.0.0.1,localhost", true),
        ("127.0.0.1", "127.0.0.1,localhost,", true),
        ("127.0.0.1", "127.0.0.1/8,localhost,", true),
        ("127.0.0.1", "127.0.0.1/28,localhost,", true),
        ("127.0.0.1", "127.0.0.1/31,localhost,", true),
        ("127.0.0.1", "localhost,127.0.0.1", true),
        (
            "127.0.0.1",
            "localhost,127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1."
                + "127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.", false
        ),
        (
            "127.0.0.1",
            "localhost,127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1."
                + "127.0.0.1.127.0.0.1.127.0.0.1.127.0.0", false
        ),
        ("localhost", "localhost,127.0.0.1", true),
        ("localhost", "127.0.0.1,localhost", true),
        ("foobar", "barfoo", false),
        ("foobar", "foobar", true),
        ("192.168.0.1", "foobar", false),
        ("192.168.0.1", "192.168.0.0/16", true),
        ("192.168.0.1", "192.168.0.0/16a", false),
        ("192.168.0.1", "192.168.0.0/16 ", true),
        ("192.168.0.1", "192.168.0.0/a16", false),
        ("192.168.0.1", "192.168.0.0/ 16", false),
        ("192.168.0.1", "192.168.0.0/24", true),
        ("192.168.0.1", "192.168.0.0/32", false),
        ("192.168.0.1", "192.168.0.1/32", true),
        ("192.168.0.1", "192.168.0.1/33", false),
        ("192.168.0.1", "192.168.0.0", false),
        ("192.168.1.1", "192.168.0.0/24", false),
        ("192.168.1.1", "192.168.0.0/33", false),
        ("192.168.1.1", "foo, bar, 192.168.0.0/24", false),
        ("192.168.1.1", "foo, bar, 192.168.0.0/16", true),
        ("[::1]", "foo, bar, 192.168.0.0/16", false),
        ("[::1]", "foo, bar, ::1/64", true),
        ("::1", "foo, bar, 192.168.0.0/16", false),
        ("::1", "foo, bar, ::1/64", true),
        ("::1", "::1/64", true),
        ("::1", "::1/96", true),
        ("::1", "::1/129", false),
        ("::1", "::1/128", true),
        ("::1", "::1/127", true),
        ("::1", "::1/a127", false),
        ("::1", "::1/127a", false),
        ("::1", "::1/ 127", false),
        ("::1", "::1/127 ", true),
        ("::1", "::1/126", true),
        ("::1", "::1/125", true),
        ("::1", "::1/124", true),
        ("::1", "::1/123", true),
        ("::1", "::1/122", true),
        ("2001:db8:8000::1", "2001:db8::/65", false),
        ("2001:db8:8000::1", "2001:db8::/66", false),
        ("2001:db8:8000::1", "2001:db8::/67", false),
        ("2001:db8:8000::1", "2001:db8::/68", false),
        ("2001:db8:8000::1", "2001:db8::/69", false),
        ("2001:db8:8000::1", "2001:db8::/70", false),
        ("2001:db8:8000::1", "2001:db8::/71", false),
        ("2001:db8:8000::1", "2001:db8::/72", false),
        ("2001:db8::1", "2001:db8::/65", true),
        ("2001:db8::1", "2001:db8::/66", true),
        ("2001:db8::1", "2001:db8::/67", true),
        ("2001:db8::1", "2001:db8::/68", true),
        ("2001:db8::1", "2001:db8::/69", true),
        ("2001:db8::1", "2001:db8::/70", true),
        ("2001:db8::1", "2001:db8::/71", true),
        ("2001:db8::1", "2001:db8::/72", true),
        ("bar", "foo, bar, ::1/64", true),
        ("BAr", "foo, bar, ::1/64", true),
        ("BAr", "foo,,,,,              bar, ::1/64", true),
        ("www.example.com", "foo, .example.com", true),
        ("www.example.com", "www2.example.com, .example.net", false),
        ("example.com", ".example.com, .example.net", true),
        ("nonexample.com", ".example.com, .example.net", false),
    ]

    @Test("curl's unit1614 no-proxy cases")
    func curlUnitCases() {
        for (host, list, match) in Self.unit1614 {
            #expect(ProxyRules.bypasses(host: host, list: list) == match, "\(host) in \(list.debugDescription)")
        }
    }

    @Test("curl's unit1614 CIDR cases (Curl_cidr4_match, Curl_cidr6_match)")
    func cidrCases() {
        let v4: [(String, String, UInt32, Bool)] = [
            ("192.160.0.1", "192.160.0.1", 33, false), ("192.160.0.1", "192.160.0.1", 32, true),
            ("192.160.0.1", "192.160.0.1", 0, true), ("192.160.0.1", "192.160.0.1", 24, true),
            ("192.160.0.1", "192.160.0.1", 26, true), ("192.160.0.1", "192.160.0.1", 20, true),
            ("192.160.0.1", "192.160.0.1", 18, true), ("192.160.0.1", "192.160.0.1", 12, true),
            ("192.160.0.1", "192.160.0.1", 8, true), ("192.160.0.1", "10.0.0.1", 8, false),
            ("192.160.0.1", "10.0.0.1", 32, false), ("192.160.0.1", "10.0.0.1", 0, false),
        ]
        for (address, network, bits, match) in v4 {
            #expect(ProxyRules.cidr4(address, network, bits: bits) == match, "\(address) in \(network)/\(bits)")
        }
        let v6: [(String, String, UInt32, Bool)] = [
            ("::1", "::1", 0, true), ("::1", "::1", 128, true), ("::1", "0:0::1", 128, true),
            ("::1", "0:0::1", 129, false),
            ("fe80::ab47:4396:55c9:8474", "fe80::ab47:4396:55c9:8474", 64, true),
        ]
        for (address, network, bits, match) in v6 {
            #expect(ProxyRules.cidr6(address, network, bits: bits) == match, "\(address) in \(network)/\(bits)")
        }
    }

    @Test("More list cases: '*' only alone, blanks and tabs, case, dots, ports, IPv4 vs IPv6, odd tokens")
    func moreListCases() {
        let cases: [(String, String, Bool)] = [
            ("anything.example", "*", true),
            ("127.0.0.1", "*", true),
            // '*' is the wildcard only as the whole list (strcmp), never as one entry.
            ("anything.example", "*,foo", false),
            ("anything.example", " *", false),
            ("anything.example", "*.example", false),
            ("a.example", "", false),
            ("a.example", ",,, ,\t", false),
            ("a.example", "x.example\ta.example", true),
            ("A.EXAMPLE", "a.example", true),
            ("a.example", "A.Example.", true),
            ("a.example", "..a.example", false),
            ("a.example.", ".a.example.", true),
            ("b.a.example", "a.example", true),
            ("ba.example", "a.example", false),
            ("a.example", "b.a.example", false),
            // The request's port plays no part; a port in the list is part of the name.
            ("a.example", "a.example:8080", false),
            ("10.1.2.3", "10.0.0.0/8", true),
            ("11.1.2.3", "10.0.0.0/8", false),
            ("10.1.2.3", "10.1.2.3/0", true),
            ("10.1.2.4", "10.1.2.3/0", false),
            ("10.1.2.3", "::ffff:10.1.2.3", false),
            ("::ffff:10.1.2.3", "10.1.2.3", false),
            ("fd00::1234", "fd00::/8", true),
            ("fe00::1234", "fd00::/8", false),
            ("fd00::1234", "fd00::/7", true),
            ("fc00::1", "fd00::/7", true),
            ("fe00::1", "fd00::/7", false),
            ("::1", "0:0:0:0:0:0:0:1", true),
            ("[::1]", "::1", true),
            ("::1", "[::1]", false),
            ("10.0.0.1", "10.0.0.1/8/8", false),
            ("10.0.0.1", "10.0.0.1/-1", false),
            ("", "*", false),
            ("", "a", false),
            ("a", ".", false),
        ]
        for (host, list, match) in cases {
            #expect(ProxyRules.bypasses(host: host, list: list) == match, "\(host) in \(list.debugDescription)")
        }
    }

    @Test("libcurl 7.88.1's own decisions: IPv6 hosts compared as names, CIDR lengths read with atoi")
    func libcurl788Dialect() {
        let cases: [(String, String, curl: Bool, libcurl788: Bool)] = [
            ("::1", "::1", true, true),
            ("::1", "::1/128", true, false),
            ("::1", "0:0::1", true, false),
            ("fd00::1", "fd00::/8", true, false),
            ("192.168.0.1", "192.168.0.0/16a", false, true),
            ("192.168.0.1", "192.168.0.0/16", true, true),
            ("www.example.com", "localhost .example.com", true, true),
        ]
        for (host, list, curl, libcurl788) in cases {
            #expect(ProxyRules.bypasses(host: host, list: list, dialect: .curl) == curl, "\(host) in \(list)")
            #expect(
                ProxyRules.bypasses(host: host, list: list, dialect: .libcurl788) == libcurl788, "\(host) in \(list)")
        }
    }

    // MARK: - The configuration type

    @Test("Proxy.url validates: http only, a host, a port in range; errors never quote the URL")
    func validation() {
        for text in [
            "https://proxy:443", "socks5://hunter2:hunter2@proxy", "http://", "http://:8080", "http://proxy:0",
            "http://proxy:70000", "file:///tmp/x",
        ] {
            guard let url = URL(string: text) else { continue }
            do throws(ResumableError) {
                try DownloadTask.Proxy.url(url).validate()
                Issue.record("\(text) was accepted")
            } catch {
                #expect(error.code == .proxy, "\(text): \(error)")
                #expect(!error.message.contains("hunter2"), "\(error)")
            }
        }
        #expect((try? DownloadTask.Proxy.url(URL(string: "http://proxy:3128")!).validate()) != nil)
        #expect((try? DownloadTask.Proxy.url(URL(string: "http://proxy:3128")!).bypassing("x").validate()) != nil)
        #expect((try? DownloadTask.Proxy.url(URL(string: "https://proxy")!).bypassing("x").validate()) == nil)
        #expect((try? DownloadTask.Proxy.environment.validate()) != nil)
        #expect((try? DownloadTask.Proxy.none.validate()) != nil)
    }

    @Test("Credentials never appear in a description, a debug description, a dump or an error")
    func credentialsStayHidden() throws {
        let secret = "hunter2-\(UUID().uuidString)"
        let withUserInfo = DownloadTask.Proxy.url(URL(string: "http://alice:\(secret)@proxy:3128")!)
        let explicit = DownloadTask.Proxy.url(
            URL(string: "http://proxy:3128")!, credentials: .init(user: "alice", password: secret))
        for proxy in [withUserInfo, explicit, explicit.bypassing("example.com")] {
            var dumped = ""
            dump(proxy, to: &dumped)
            var configuration = DownloadTask.Configuration()
            configuration.proxy = proxy
            var dumpedConfiguration = ""
            dump(configuration, to: &dumpedConfiguration)
            for text in [
                proxy.description, String(describing: proxy), String(reflecting: proxy), dumped, dumpedConfiguration,
                "\(configuration)",
            ] {
                #expect(!text.contains(secret), "\(text)")
            }
            #expect(proxy.description.contains("http://proxy:3128 (with credentials)"), "\(proxy)")
        }
        #expect(withUserInfo == explicit, "userinfo becomes the same credentials")
        let route = try ProxyRules(environment: [:]).route(for: URL(string: "http://x/")!, proxy: explicit)
        #expect(route.proxy?.credentials?.password == secret)
        #expect(!route.description.contains(secret))
        // Explicit credentials win over userinfo.
        let both = DownloadTask.Proxy.url(
            URL(string: "http://bob:other@proxy:3128")!, credentials: .init(user: "alice", password: secret))
        #expect(both == explicit)
    }

    @Test("The command line's --proxy: '' is none, a bare host:port is http, junk is refused without quoting it")
    func commandLine() {
        #expect(DownloadTask.Proxy.commandLine("") == .none)
        #expect(DownloadTask.Proxy.commandLine("proxy:3128") == .url(URL(string: "http://proxy:3128")!))
        #expect(DownloadTask.Proxy.commandLine("proxy") == .url(URL(string: "http://proxy:1080")!))
        let bad = DownloadTask.Proxy.commandLine("socks5://u:hunter2@proxy")
        let reason = bad.invalidReason ?? ""
        #expect(!reason.isEmpty)
        #expect(!reason.contains("hunter2"))
    }

    @Test("The URLSession transport refuses what its libcurl would route otherwise, before sending anything")
    func urlSessionAgreement() throws {
        #if canImport(FoundationNetworking)
            func check(_ url: String, _ proxy: DownloadTask.Proxy, _ environment: [String: String]) -> ResumableError? {
                let request = TransportRequest(
                    url: URL(string: url)!, headers: [], idleTimeout: .seconds(1), proxy: proxy)
                do throws(ResumableError) {
                    try URLSessionTransport.checkProxy(for: request, rules: ProxyRules(environment: environment))
                    return nil
                } catch {
                    return error
                }
            }
            let explicit = DownloadTask.Proxy.url(URL(string: "http://explicit:1")!)
            // Agreement: allowed.
            #expect(check("http://a.example/", .environment, [:]) == nil)
            #expect(check("http://a.example/", .environment, ["http_proxy": "p:1"]) == nil)
            #expect(check("http://a.example/", .none, [:]) == nil)
            #expect(check("http://a.example/", .none, ["http_proxy": "p:1", "no_proxy": "a.example"]) == nil)
            #expect(check("http://a.example/", explicit, ["http_proxy": "explicit:1"]) == nil)
            // Disagreement: refused with .proxy.
            #expect(check("http://a.example/", .none, ["http_proxy": "p:1"])?.code == .proxy)
            #expect(check("http://a.example/", explicit, [:])?.code == .proxy)
            #expect(
                check("http://a.example/", .environment.bypassing("a.example"), ["http_proxy": "p:1"])?.code == .proxy)
            #expect(check("http://[::1]/", .environment, ["http_proxy": "p:1", "no_proxy": "::1/128"])?.code == .proxy)
            #expect(check("https://a.example/", .none, ["https_proxy": "socks5://p"])?.code == .proxy)
            // https through a proxy: Foundation would take the CONNECT answer for the server's.
            #expect(check("https://a.example/", .environment, ["https_proxy": "p:1"])?.code == .proxy)
            #expect(check("https://a.example/", .environment, ["https_proxy": "p:1", "no_proxy": "a.example"]) == nil)
            #expect(check("https://a.example/", .environment, [:]) == nil)
            let refused = check("http://a.example/", .none, ["http_proxy": "http://u:hunter2@p:1"])
            let message = refused?.message ?? ""
            #expect(!message.contains("hunter2"))
            #expect(message.contains("libcurl transport"), "\(message)")
        #endif
    }
}
