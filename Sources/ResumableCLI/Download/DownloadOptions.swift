import Foundation
import Resumable

/// The options `get` and `resume` share, and how they become a library configuration.
struct DownloadOptions: Sendable {
    /// The shared arguments, in help order.
    static let arguments: [ArgumentSpec] =
        [
            .repeatable(
                "header", short: "H", value: "name: value",
                help: "An extra request header, e.g. 'Accept: */*'. Credential headers (Authorization, Cookie, and any "
                    + "name containing auth, cookie, credential, csrf, jwt, key, passphrase, passwd, password, secret, "
                    + "session, signature, token or xsrf, e.g. X-Api-Key) are sent to the original host only and never "
                    + "written into a token."),
            .repeatable(
                "sensitive-header", value: "name",
                help: "Treat this header name as a credential too (case-insensitive): never written into a token, "
                    + "never sent to another host after a redirect."),
            .option(
                "retries", value: "n",
                help: "How many transient failures in a row (network errors, timeouts, 5xx, 408, 429) are retried, "
                    + "with backoff from 0.25 s doubling up to 5 s. Default: 5."),
            .option(
                "timeout", value: "seconds",
                help: "A stall without data longer than this is a transient failure (and retried). Default: 60."),
            .option(
                "connect-timeout", value: "seconds",
                help: "How long connecting (TCP, TLS, a proxy tunnel) may take before the attempt fails. Default: 30."),
            .option(
                "max-time", value: "seconds",
                help: "The longest the whole download may take, retries included. When it passes, the download stops "
                    + "with a token to resume from (exit status 75). Default: no limit."),
            .option(
                "sha256", value: "hex",
                help: "The SHA-256 the finished file must have. On a mismatch the file is deleted, no token is kept, "
                    + "and the exit status is 1."),
            .option(
                "transport", value: "name",
                help: "How bytes are moved: 'auto' (the default: libcurl when it loads, else URLSession), 'libcurl' "
                    + "or 'urlsession'."),
            .option(
                "connections", value: "n|auto",
                help: "How many connections to download with at once, 1 to 16, or 'auto' (the default): one while less "
                    + "than 16 MiB is missing, else start with one and double while the rate improves. Every segment is a range "
                    + "request checked with If-Range; a file that changed restarts from the beginning."),
            .option(
                "limit-rate", value: "rate",
                help: "Receive at most this many bytes per second, all connections together, e.g. 500000, 512k, 2M "
                    + "or 1G (k, m, g: powers of 1024). Smooth to within a burst of 50 ms (at least 16 KiB). "
                    + "Default: no limit."),
            .flag("overwrite", help: "Replace an existing file of the same name instead of choosing 'name (1).ext'."),
        ] + TLSOptions.arguments + ProxyOptions.arguments + [
            .flag("quiet", short: "q", help: "No progress output. Errors and resume hints are still printed."),
            .flag(
                "json",
                help: "Events as JSON lines on standard error; the final result as one JSON object on standard output."),
        ]

    /// Extra request headers.
    var headers: [String: String] = [:]
    /// `--sensitive-header` names.
    var sensitiveHeaderNames: Set<String> = []
    /// `--retries`, when given.
    var retries: Int?
    /// `--timeout`, when given.
    var idleTimeout: Duration?
    /// `--connect-timeout`, when given.
    var connectTimeout: Duration?
    /// `--max-time`, when given.
    var deadline: Duration?
    /// `--cacert`, `--cert`, `--key`, `--pinnedpubkey`.
    var tls: TLSOptions
    /// `--proxy`, `--noproxy`.
    var proxy: ProxyOptions
    /// `--sha256`, lowercased, when given.
    var sha256: String?
    /// `--overwrite`.
    var overwrite = false
    /// `--transport`.
    var transport: DownloadTask.Transport = .automatic
    /// `--connections`.
    var connections: DownloadTask.Connections = .automatic
    /// `--limit-rate` in bytes per second, when given.
    var limitRate: Int?
    /// How to report while running.
    var outputMode: OutputMode = .silent

    /// Reads the shared options from a parse.
    init(_ parsed: ParsedArguments) throws(UsageError) {
        for header in parsed.values("header") {
            guard let colon = header.firstIndex(of: ":") else {
                throw UsageError("header '\(header)' is not of the form 'Name: value'")
            }
            let name = header[..<colon].trimmingCharacters(in: .whitespaces)
            let value = header[header.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            // The library's own header rules (package access), not a copy.
            guard HTTPFieldSyntax.isValidName(name) else {
                throw UsageError("header '\(header)' has no valid name before the ':'")
            }
            guard HTTPFieldSyntax.isValidValue(value) else {
                throw UsageError("header '\(name)' has a control character in its value")
            }
            headers[name] = value
        }
        for name in parsed.values("sensitive-header") {
            guard HTTPFieldSyntax.isValidName(name) else {
                throw UsageError("option '--sensitive-header' needs a header name, not '\(name)'")
            }
            sensitiveHeaderNames.insert(name.lowercased())
        }
        retries = try parsed.integer("retries", in: 0...1000)
        idleTimeout = try parsed.seconds("timeout")
        connectTimeout = try parsed.seconds("connect-timeout")
        deadline = try parsed.seconds("max-time")
        tls = try TLSOptions(parsed)
        proxy = try ProxyOptions(parsed)
        if let hex = parsed.value("sha256") {
            // The library's rule (package access), so what passes here is what a task accepts.
            guard let digest = SHA256Digest.normalized(hex) else {
                throw UsageError("option '--sha256' needs 64 hexadecimal digits, not '\(hex)'")
            }
            sha256 = digest
        }
        switch parsed.value("transport")?.lowercased() {
        case nil, "auto", "automatic": transport = .automatic
        case "libcurl", "curl": transport = .libcurl
        case "urlsession": transport = .urlSession
        case let other?:
            throw UsageError("option '--transport' takes 'auto', 'libcurl' or 'urlsession', not '\(other)'")
        }
        if let text = parsed.value("connections") {
            // The library's own parsing and bounds (package access).
            guard let parsedConnections = DownloadTask.Connections(argument: text.lowercased()) else {
                throw UsageError(
                    "option '--connections' takes a number from 1 to \(DownloadTask.Connections.maximum) or 'auto', "
                        + "not '\(text)'")
            }
            connections = parsedConnections
        }
        limitRate = try parsed.limitRate("limit-rate")
        overwrite = parsed.flag("overwrite")
        outputMode = OutputMode.choose(json: parsed.flag("json"), quiet: parsed.flag("quiet"))
    }

    /// The library configuration for these options, with `checkpointing` attached.
    func configuration(checkpointing: DownloadTask.Checkpointing) -> DownloadTask.Configuration {
        var configuration = DownloadTask.Configuration(
            headers: headers,
            sensitiveHeaderNames: sensitiveHeaderNames,
            existingFile: overwrite ? .overwrite : .chooseFreeName,
            checkpointing: checkpointing,
            expectedSHA256: sha256,
            computesSHA256: outputMode.isJSON
        )
        configuration.transport = transport
        configuration.connections = connections
        if let retries {
            configuration.retry = DownloadTask.RetryPolicy(maximumRetries: retries)
        }
        if let idleTimeout {
            configuration.idleTimeout = idleTimeout
        }
        if let connectTimeout {
            configuration.connectTimeout = connectTimeout
        }
        configuration.deadline = deadline
        if let limitRate {
            configuration.rateLimiters = [RateLimiter(bytesPerSecond: limitRate)]
        }
        tls.apply(to: &configuration)
        proxy.apply(to: &configuration)
        return configuration
    }
}
