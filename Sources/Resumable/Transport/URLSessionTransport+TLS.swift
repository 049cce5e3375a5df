import Foundation

extension URLSessionTransport {
    /// Refuses an https request whose TLS configuration this transport cannot honor, instead of ignoring it.
    ///
    /// FoundationNetworking on Linux drives libcurl but exposes none of its TLS options: it always verifies against
    /// libcurl's built-in CA bundle and directory (its `URLSessionCertificateAuthorityInfoFile` variable is read on
    /// Android only), never presents a client certificate, and has no server-trust challenge
    /// (`URLProtectionSpace.serverTrust` is unsupported) through which a pin or another trust store could be
    /// checked. This transport implements none of it on Apple platforms either. So only the system's store, with no
    /// client certificate and no pin, can be used here.
    ///
    /// Trust that names one of the system's own locations is the system's store and passes: a file that is (after
    /// resolving links) one of the CA bundles FoundationNetworking looks for, or the directory `/etc/ssl/certs`.
    /// Containers commonly set `CURL_CA_BUNDLE`, `SSL_CERT_FILE` or `SSL_CERT_DIR` to exactly those. Plain http
    /// requests are never refused: their TLS settings do not apply (a redirect to https is checked when it is
    /// requested).
    ///
    /// - Throws: ``ResumableError/Code/tls`` naming the setting; permanent, so the task is not retried.
    static func checkTLS(for request: TransportRequest) throws(ResumableError) {
        guard request.url.scheme?.lowercased() == "https" else { return }
        let tls = request.tls
        var settings: [String] = []
        let trust = tls.trust.locations
        if !trust.system && !isSystemStore(file: trust.file, directory: trust.directory) {
            settings.append("trust in \(tls.trust.resolved(environment: ProcessInfo.processInfo.environment))")
        }
        if tls.clientCertificate != nil { settings.append("a client certificate") }
        if tls.pinnedPublicKey != nil { settings.append("a pinned public key") }
        guard !settings.isEmpty else { return }
        throw ResumableError(
            .tls,
            "the URLSession transport cannot honor \(settings.joined(separator: ", ")) for \(request.url.host ?? "?")"
                + "; use the libcurl transport (Transport.libcurl, which .automatic picks when libcurl loads)")
    }

    /// The CA bundles FoundationNetworking falls back on, in its order (EasyHandle.setCARootBundlePath), the first
    /// of which is also libcurl's built-in default on Debian, Ubuntu, Alpine and Fedora.
    static let systemBundles = [
        "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/usr/share/ssl/certs/ca-bundle.crt",
        "/usr/local/share/certs/ca-root-nss.crt", "/etc/ssl/cert.pem",
    ]

    /// Whether exactly one location is named and it is one of the system's own (links resolved).
    static func isSystemStore(file: String?, directory: String?) -> Bool {
        func resolved(_ path: String) -> String { URL(fileURLWithPath: path).resolvingSymlinksInPath().path }
        switch (file, directory) {
        case (let file?, nil):
            let target = resolved(file)
            return systemBundles.contains { FileManager.default.fileExists(atPath: $0) && resolved($0) == target }
        case (nil, let directory?):
            return resolved(directory) == resolved("/etc/ssl/certs")
        default:
            return false
        }
    }
}
