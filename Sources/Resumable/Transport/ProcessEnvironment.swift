#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reads a few environment variables by name.
///
/// `ProcessInfo.processInfo.environment` copies the whole environment into a dictionary of `String`s on every
/// access; reading the proxy and trust variables that way cost about 40 µs per request (three times per download:
/// the task's TLS check, the curl TLS options, the proxy route), a twentieth of a small file's whole CPU time.
/// `getenv` reads the same `environ` at the same instant, so what is seen does not change.
enum ProcessEnvironment {
    /// The variables among `names` that are set (empty ones included), by name.
    static func values(_ names: [String]) -> [String: String] {
        var found: [String: String] = [:]
        for name in names {
            if let value = getenv(name) { found[name] = String(cString: value) }
        }
        return found
    }
}
