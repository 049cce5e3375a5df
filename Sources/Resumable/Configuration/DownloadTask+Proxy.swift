import Foundation

extension DownloadTask {
    /// Which proxy requests go through, decided afresh for every request (a redirect to another host is decided
    /// for that host).
    ///
    /// ``environment`` (the default) follows curl's rules exactly: for an `http` URL the lowercase `http_proxy`
    /// only, for an `https` URL `https_proxy` then `HTTPS_PROXY`, and failing those `all_proxy` then `ALL_PROXY`; a
    /// host that `no_proxy` (or, when that is unset, `NO_PROXY`) lists goes directly. Empty variables count as unset.
    /// There are no other exceptions: a loopback host goes through the proxy unless the list names it.
    ///
    /// The bypass list (curl's `--noproxy`, `NO_PROXY`) is `*` for every host, or names separated by commas or
    /// blanks: a host name matches itself and its subdomains (`example.com` and `.example.com` both match
    /// `example.com` and `www.example.com`, never `notexample.com`), case-insensitively; an IPv4 or IPv6 address
    /// matches itself, or a range in CIDR notation (`10.0.0.0/8`, `fd00::/8`). Ports play no part.
    ///
    /// Only `http://` proxies are supported (`host:port` alone means `http://host:port`; without a port, 1080, as
    /// in curl). Credentials are sent to the proxy with Basic authentication; they are never written into a token
    /// and never appear in a ``description`` or an error message.
    public struct Proxy: Hashable, Sendable, CustomStringConvertible {
        enum Kind: Hashable, Sendable {
            case environment
            case none
            case server(Server)
        }

        /// An explicit proxy: where it is and how to log in.
        struct Server: Hashable, Sendable {
            /// The host, without brackets for an IPv6 address.
            var host: String
            var port: Int
            var credentials: Credentials?
        }

        let kind: Kind
        /// The bypass list; `nil` reads `no_proxy`/`NO_PROXY` from the environment, as curl does.
        let noProxy: String?

        init(kind: Kind, noProxy: String? = nil) {
            self.kind = kind
            self.noProxy = noProxy
        }

        /// The proxy the environment names, by curl's rules (`http_proxy`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`).
        /// The default.
        public static let environment = Proxy(kind: .environment)
        /// Every request goes directly to its server, whatever the environment says.
        public static let none = Proxy(kind: .none)

        /// Every request goes through the `http://` proxy at `url`, except for the hosts the environment's
        /// `no_proxy`/`NO_PROXY` lists (curl's `--proxy`; use ``bypassing(_:)`` to replace that list).
        ///
        /// - Parameters:
        ///   - url: `http://host:port`. A user and password in the URL (percent-encoded) are used when
        ///     `credentials` is `nil`, and are kept only as ``Credentials``.
        ///   - credentials: The proxy's user and password, sent with Basic authentication.
        ///
        /// A URL of another scheme, or without a host, makes creating the task fail with
        /// ``ResumableError/Code/proxy``.
        public static func url(_ url: URL, credentials: Credentials? = nil) -> Proxy {
            parsing(url.absoluteString, guessingScheme: false, credentials: credentials)
        }

        /// The proxy a curl command line's `--proxy` names: `""` is ``none``; a string without `scheme://` is
        /// completed as curl guesses (`host:port` is `http://host:port`). Check ``invalidReason``.
        package static func commandLine(_ text: String) -> Proxy {
            text.isEmpty ? .none : parsing(text, guessingScheme: true, credentials: nil)
        }

        private static func parsing(_ text: String, guessingScheme: Bool, credentials: Credentials?) -> Proxy {
            switch ProxyAddress.parse(text, guessingScheme: guessingScheme) {
            case .address(let address):
                let server = Server(
                    host: address.host, port: address.port, credentials: credentials ?? address.credentials)
                return Proxy(kind: .server(server))
            case .invalid(let reason):
                return Proxy(kind: .server(Server(host: "", port: 0, credentials: nil)), invalid: reason)
            }
        }

        /// This proxy, except for the hosts `list` names, which are reached directly: curl's `--noproxy`. The list
        /// replaces the environment's `no_proxy`/`NO_PROXY`; `""` bypasses no host, `"*"` every host. No effect on
        /// ``none``.
        public func bypassing(_ list: String) -> Proxy {
            var copy = Proxy(kind: kind, noProxy: list)
            copy.invalidReason = invalidReason
            return copy
        }

        /// Why the proxy URL given to ``url(_:credentials:)`` cannot be used, checked by ``validate()``; never
        /// quotes the URL, which may hold a password.
        package private(set) var invalidReason: String?

        private init(kind: Kind, invalid: String) {
            self.kind = kind
            self.noProxy = nil
            self.invalidReason = invalid
        }

        /// `environment`, `none`, or the proxy's address (never its credentials), with the bypass list if one was
        /// given.
        public var description: String {
            var text: String
            switch kind {
            case .environment: text = "environment"
            case .none: return "none"
            case .server(let server):
                text = ProxyAddress(host: server.host, port: server.port, credentials: nil).description
                if server.credentials != nil { text += " (with credentials)" }
            }
            if let noProxy { text += ", bypassing \"\(noProxy)\"" }
            return text
        }

        /// Checks this configuration when a task is created, so a bad one fails at once with a typed error instead
        /// of after the first request.
        ///
        /// - Throws: ``ResumableError/Code/proxy`` when the URL given to ``url(_:credentials:)`` is not `http`, or
        ///   has no host or an invalid port.
        func validate() throws(ResumableError) {
            if let invalidReason {
                throw ResumableError(.proxy, "the proxy URL cannot be used: \(invalidReason)")
            }
            // libcurl takes C strings: a NUL would silently cut a host or credential short, and reach another one.
            if case .server(let server) = kind,
                server.host.contains("\0")
                    || server.credentials.map({ "\($0.user)\($0.password)".contains("\0") }) == true
            {
                throw ResumableError(.proxy, "the proxy's host or credentials contain a NUL character")
            }
            if noProxy?.contains("\0") == true {
                throw ResumableError(.proxy, "the proxy bypass list contains a NUL character")
            }
        }

        /// A user name and password for a proxy. Its ``description`` and its reflection never show them.
        public struct Credentials: Hashable, Sendable, CustomStringConvertible, CustomDebugStringConvertible,
            CustomReflectable
        {
            /// The user name.
            public var user: String
            /// The password.
            public var password: String

            /// Credentials for a proxy that asks for Basic authentication.
            public init(user: String, password: String) {
                self.user = user
                self.password = password
            }

            public var description: String { "<credentials>" }
            public var debugDescription: String { "<credentials>" }
            public var customMirror: Mirror { Mirror(self, children: [:]) }
        }
    }
}

/// A proxy's address as curl reads it from a string (`CURLOPT_PROXY`, `http_proxy`, …): scheme (http only here),
/// host, port (1080 when absent), and percent-decoded credentials.
struct ProxyAddress: Hashable, Sendable, CustomStringConvertible {
    /// The host, without brackets for an IPv6 address.
    var host: String
    var port: Int
    var credentials: DownloadTask.Proxy.Credentials?

    /// What ``parse(_:guessingScheme:)`` found.
    enum Parsed {
        case address(ProxyAddress)
        /// Why the string cannot be used (never quoting it).
        case invalid(String)
    }

    /// curl's port for a proxy string without one (`CURL_DEFAULT_PROXY_PORT`).
    static let defaultPort = 1080

    /// `http://host:port`, brackets around an IPv6 address; never the credentials. curl reads it back as the same
    /// proxy.
    var description: String {
        host.contains(":") ? "http://[\(host)]:\(port)" : "http://\(host):\(port)"
    }

    /// Reads a proxy string.
    ///
    /// - Parameter guessingScheme: Whether a string without `scheme://` is taken as curl guesses (`CURLU_GUESS_SCHEME`:
    ///   `ftp.`, `dict.`, `ldap.`, `imap.`, `smtp.` and `pop3.` hosts as those schemes, any other as http), which
    ///   curl does for the environment and for `--proxy`.
    /// - Returns: The address, or why it cannot be used (never quoting credentials).
    static func parse(_ text: String, guessingScheme: Bool) -> Parsed {
        var text = text
        if guessingScheme, !text.contains("://") {
            let lowered = text.lowercased()
            let guessed = ["ftp", "dict", "ldap", "imap", "smtp", "pop3"].first { lowered.hasPrefix($0 + ".") }
            text = (guessed ?? "http") + "://" + text
        }
        guard let components = URLComponents(string: text), let scheme = components.scheme else {
            return .invalid("it is not a URL")
        }
        guard scheme.lowercased() == "http" else {
            return .invalid(
                "its scheme '\(scheme)' is not supported (only http:// proxies are)")
        }
        guard var host = components.percentEncodedHost, !host.isEmpty else {
            return .invalid("it has no host")
        }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        host = host.removingPercentEncoding ?? host
        // A host name or an IP address, nothing else: a NUL would cut the name short on its way to curl (another
        // proxy, with the credentials), and a name curl refuses comes back quoted in its error, password and all.
        guard !host.isEmpty, host.utf8.allSatisfy(Self.isHostByte) else {
            return .invalid("it has no valid host")
        }
        let port = components.port ?? defaultPort
        guard (1...65535).contains(port) else { return .invalid("its port \(port) is out of range") }
        var credentials: DownloadTask.Proxy.Credentials?
        if let user = components.percentEncodedUser {
            let password = components.percentEncodedPassword ?? ""
            credentials = .init(
                user: user.removingPercentEncoding ?? user, password: password.removingPercentEncoding ?? password)
        } else if let password = components.percentEncodedPassword {
            credentials = .init(user: "", password: password.removingPercentEncoding ?? password)
        }
        if let credentials,
            (credentials.user + credentials.password).unicodeScalars.contains(where: {
                $0.value < 0x20 || $0.value == 0x7F
            })
        {
            return .invalid("its user name or password holds a control character")
        }
        return .address(ProxyAddress(host: host, port: port, credentials: credentials))
    }

    /// A byte of a host name (letters, digits, `-`, `.`, `_`) or of an IP address literal (`:`, hexadecimal digits).
    private static func isHostByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: ":"):
            true
        default: false
        }
    }
}
