import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where one request goes: directly, or through a proxy.
struct ProxyRoute: Hashable, Sendable, CustomStringConvertible {
    /// The proxy, or `nil` for a direct connection.
    var proxy: ProxyAddress?
    /// What decided it, for messages: `"https_proxy"`, `"NO_PROXY"`, `"the configuration"`, …
    var reason: String

    static func direct(_ reason: String) -> ProxyRoute { ProxyRoute(proxy: nil, reason: reason) }

    /// Two routes are the same when they connect the same way, whatever decided them.
    static func == (lhs: ProxyRoute, rhs: ProxyRoute) -> Bool { lhs.proxy == rhs.proxy }
    func hash(into hasher: inout Hasher) { hasher.combine(proxy) }

    var description: String {
        if let proxy { return "through \(proxy) (\(reason))" }
        return "direct (\(reason))"
    }
}

/// curl's rules for choosing a proxy, as a pure value over a snapshot of the environment.
///
/// Follows `detect_proxy` and `create_conn_helper_init_proxy` in curl 7.88's `lib/url.c` and `Curl_check_noproxy`
/// in `lib/noproxy.c`:
/// - The bypass list is the configured one (`CURLOPT_NOPROXY`, `--noproxy`) or else `no_proxy`, or else
///   `NO_PROXY`; it applies to an explicit proxy as well as to one from the environment.
/// - For an `http` URL only the lowercase `http_proxy` is read (an `HTTP_PROXY` may come from a CGI request's
///   `Proxy:` header, the "httpoxy" attack); for `https`, `https_proxy` then `HTTPS_PROXY`; failing those,
///   `all_proxy` then `ALL_PROXY`.
/// - An empty variable counts as unset (`curl_getenv`).
///
/// Two corrections over 7.88.1, both as curl 8.x behaves: an IPv6 host is compared as an address (7.88.1 compares
/// it as a name, so `::1/128` or `0:0::1` never match `[::1]`, and its IPv6 CIDR test was inverted), and a CIDR
/// prefix length must be all digits (`10.0.0.0/8a` matches nothing; 7.88.1 read it with `atoi`).
/// ``bypasses(host:list:dialect:)`` with ``Dialect/libcurl788`` reproduces 7.88.1 for the URLSession transport, whose
/// libcurl reads the environment itself.
struct ProxyRules: Sendable {
    /// Which curl's no-proxy matching to follow.
    enum Dialect: Sendable {
        /// curl's rules as they are meant (and as curl 8.x implements them).
        case curl
        /// libcurl 7.88.1 as it really decides: IPv6 hosts compared as names, CIDR lengths read with `atoi`.
        case libcurl788
    }

    /// The variables, by name. Only the proxy variables are read.
    var environment: [String: String]

    /// The rules over `environment`, by default the process's environment now.
    init(environment: [String: String] = ProcessEnvironment.values(ProxyRules.variableNames)) {
        self.environment = environment
    }

    /// The variables curl reads, in the order it reads them.
    static let variableNames = [
        "http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY",
    ]

    /// A variable's value, `nil` when unset or empty.
    private func variable(_ name: String) -> (name: String, value: String)? {
        guard let value = environment[name], !value.isEmpty else { return nil }
        return (name, value)
    }

    /// The environment's bypass list: `no_proxy`, else `NO_PROXY`.
    var environmentNoProxy: (name: String, value: String)? {
        variable("no_proxy") ?? variable("NO_PROXY")
    }

    /// The variable naming the proxy for a URL of `scheme`: `http_proxy` (never `HTTP_PROXY`) for http,
    /// `https_proxy` then `HTTPS_PROXY` for https (and likewise for any other scheme), then `all_proxy`, `ALL_PROXY`.
    func proxyVariable(forScheme scheme: String) -> (name: String, value: String)? {
        let lower = scheme.lowercased() + "_proxy"
        var found = variable(lower)
        if found == nil, lower != "http_proxy" {
            found = variable(lower.uppercased())
        }
        return found ?? variable("all_proxy") ?? variable("ALL_PROXY")
    }

    /// Where a request for `url` goes under `proxy`.
    ///
    /// - Throws: ``ResumableError/Code/proxy`` when the proxy the environment names cannot be used (another scheme
    ///   than http, no host); the message names the variable but never quotes its value, which may hold a password.
    func route(
        for url: URL, proxy: DownloadTask.Proxy, dialect: Dialect = .curl
    ) throws(ResumableError) -> ProxyRoute {
        if case .none = proxy.kind { return .direct("proxy none") }
        let host = Self.host(of: url)
        let list: (name: String, value: String)? = proxy.noProxy.map { ("the bypass list", $0) } ?? environmentNoProxy
        if let list, Self.bypasses(host: host, list: list.value, dialect: dialect) {
            return .direct("\(list.name) lists \(host)")
        }
        switch proxy.kind {
        case .none:
            return .direct("proxy none")
        case .server(let server):
            return ProxyRoute(
                proxy: ProxyAddress(host: server.host, port: server.port, credentials: server.credentials),
                reason: "the configured proxy")
        case .environment:
            guard let scheme = url.scheme, let (name, value) = proxyVariable(forScheme: scheme) else {
                return .direct("no proxy variable is set for \(url.scheme ?? "this URL")")
            }
            switch ProxyAddress.parse(value, guessingScheme: true) {
            case .address(let address):
                return ProxyRoute(proxy: address, reason: name)
            case .invalid(let reason):
                throw ResumableError(.proxy, "the proxy in \(name) cannot be used: \(reason)")
            }
        }
    }

    /// The host of `url` as curl compares it: without brackets, and an IPv4 address in any of the spellings curl's
    /// URL parser normalizes (`127.1`, `0x7f.1`, `2130706433`) in dotted decimal, as curl connects to it.
    static func host(of url: URL) -> String {
        var host = url.host ?? ""
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if IPAddress.v4(host) == nil, let normalized = IPAddress.v4Normalized(host) { return normalized }
        return host
    }

    // MARK: - The bypass list (Curl_check_noproxy)

    /// Whether `list` names `host` (no brackets around an IPv6 address; brackets are taken off if present), so the
    /// request goes directly.
    static func bypasses(host: String, list: String, dialect: Dialect = .curl) -> Bool {
        var name = Array(host.utf8)
        if dialect == .curl, name.first == UInt8(ascii: "["), name.last == UInt8(ascii: "]") {
            name = Array(name.dropFirst().dropLast())
        }
        guard !name.isEmpty, !list.isEmpty else { return false }
        if list == "*" { return true }
        enum NameType { case host, ipv4, ipv6 }
        let nameString = String(decoding: name, as: UTF8.self)
        var type = NameType.host
        if IPAddress.v4(nameString) != nil {
            type = .ipv4
        } else if dialect == .curl, IPAddress.v6(nameString) != nil {
            type = .ipv6
        } else if name.last == UInt8(ascii: ".") {
            // A trailing dot of the host name is ignored.
            name.removeLast()
        }
        let bytes = Array(list.utf8)
        var index = 0
        func isBlank(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        while index < bytes.count {
            while index < bytes.count, isBlank(bytes[index]) { index += 1 }
            let start = index
            while index < bytes.count, !isBlank(bytes[index]), bytes[index] != UInt8(ascii: ",") { index += 1 }
            let token = bytes[start..<index]
            if !token.isEmpty {
                let match: Bool
                switch type {
                case .host: match = matchesName(token: token, name: name)
                case .ipv4, .ipv6:
                    match = matchesAddress(token: token, name: nameString, v6: type == .ipv6, dialect: dialect)
                }
                if match { return true }
            }
            while index < bytes.count, isBlank(bytes[index]) { index += 1 }
            // A blank instead of a comma also separates (7.88 warns that it is deprecated).
            while index < bytes.count, bytes[index] == UInt8(ascii: ",") { index += 1 }
        }
        return false
    }

    /// A name token: equal to the host name, or a domain it ends in after a dot; one trailing and one leading dot of
    /// the token are ignored; ASCII case is ignored.
    private static func matchesName(token: ArraySlice<UInt8>, name: [UInt8]) -> Bool {
        var token = token
        if token.last == UInt8(ascii: ".") { token.removeLast() }
        if let first = token.first, first == UInt8(ascii: ".") { token.removeFirst() }
        func lower(_ byte: UInt8) -> UInt8 {
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 32 : byte
        }
        func equal(_ a: some Collection<UInt8>, _ b: some Collection<UInt8>) -> Bool {
            a.count == b.count && zip(a, b).allSatisfy { lower($0) == lower($1) }
        }
        if token.count == name.count { return equal(token, name) }
        if token.count < name.count {
            let tail = name.suffix(token.count)
            return name[name.count - token.count - 1] == UInt8(ascii: ".") && equal(token, tail)
        }
        return false
    }

    /// An address token, `address` or `address/bits`, against an address host. Tokens of 128 bytes or more never
    /// match (curl's buffer).
    private static func matchesAddress(
        token: ArraySlice<UInt8>, name: String, v6: Bool, dialect: Dialect
    ) -> Bool {
        guard token.count < 128 else { return false }
        let text = String(decoding: token, as: UTF8.self)
        var network = text
        var bits: UInt32 = 0
        if let slash = text.firstIndex(of: "/") {
            network = String(text[..<slash])
            let digits = text[text.index(after: slash)...]
            switch dialect {
            case .curl:
                guard !digits.isEmpty, digits.count <= 3, digits.allSatisfy({ $0.isASCII && $0.isNumber }),
                    let value = UInt32(digits), value <= 128
                else { return false }
                bits = value
            case .libcurl788:
                bits = UInt32(truncatingIfNeeded: atoi(String(digits)))
            }
        }
        return v6 ? cidr6(name, network, bits: bits) : cidr4(name, network, bits: bits)
    }

    /// `Curl_cidr4_match`: `bits` 0 or 32 compares the whole address; more than 32 never matches.
    static func cidr4(_ address: String, _ network: String, bits: UInt32) -> Bool {
        guard bits <= 32, let address = IPAddress.v4(address), let network = IPAddress.v4(network) else { return false }
        guard bits != 0, bits != 32 else { return address == network }
        let mask = UInt32.max << (32 - bits)
        return (address ^ network) & mask == 0
    }

    /// `Curl_cidr6_match` as curl 8.x has it: `bits` 0 means 128; more than 128 never matches.
    static func cidr6(_ address: String, _ network: String, bits: UInt32) -> Bool {
        let bits = bits == 0 ? 128 : bits
        let bytes = Int(bits / 8)
        let rest = Int(bits & 7)
        guard bytes <= 16, !(bytes == 16 && rest != 0) else { return false }
        guard let address = IPAddress.v6(address), let network = IPAddress.v6(network) else { return false }
        if address.prefix(bytes) != network.prefix(bytes) { return false }
        if rest != 0, (address[bytes] ^ network[bytes]) & UInt8(truncatingIfNeeded: 0xff << (8 - rest)) != 0 {
            return false
        }
        return true
    }
}

/// Numeric addresses, parsed with `inet_pton` as curl does.
enum IPAddress {
    /// An IPv4 address in dotted form, as a host-order integer.
    static func v4(_ text: String) -> UInt32? {
        var address = in_addr()
        guard inet_pton(AF_INET, text, &address) == 1 else { return nil }
        return UInt32(bigEndian: address.s_addr)
    }

    /// `text` in dotted decimal when it is an IPv4 address in one of the other forms `inet_aton` (and curl's URL
    /// parser) reads: one to four parts, each decimal, octal (a leading `0`) or hexadecimal (`0x`); else `nil`.
    static func v4Normalized(_ text: String) -> String? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 == UInt8(ascii: ".") || isHexOrX($0) }) else { return nil }
        var address = in_addr()
        guard inet_aton(text, &address) != 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        guard inet_ntop(AF_INET, &address, &buffer, socklen_t(buffer.count)) != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func isHexOrX(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
            UInt8(ascii: "A")...UInt8(ascii: "F"), UInt8(ascii: "x"), UInt8(ascii: "X"):
            true
        default: false
        }
    }

    /// An IPv6 address, as its 16 bytes.
    static func v6(_ text: String) -> [UInt8]? {
        var address = in6_addr()
        guard inet_pton(AF_INET6, text, &address) == 1 else { return nil }
        return withUnsafeBytes(of: &address) { Array($0) }
    }
}
