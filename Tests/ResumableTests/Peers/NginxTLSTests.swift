import Foundation
import Testing

@testable import Resumable

/// Downloads over TLS from a real nginx with certificates the tests make (``TLSCertificates``): HTTP/2 where nginx
/// offers it, HTTP/1.1 where it does not, resumes with `If-Range` over both, and every way a handshake can fail.
///
/// The libcurl transport honors every TLS setting; the URLSession transport refuses any but the system's trust
/// store (see `URLSessionTransport.checkTLS`), which the tests assert too. Pausing is deterministic as in
/// ``NginxPeerTests``: a request without `Range` under `/slow/` gets 64 KiB at once and then next to nothing.
@Suite(
    "TLS and HTTP/2 against nginx",
    .enabled(
        if: TLSCertificates.testsRun,
        "nginx or openssl is not installed (apt-get install -y nginx-light openssl): skipped locally; under CI=true these tests fail"
    )
)
struct NginxTLSTests {
    static let size = 3_000_000
    static let pauseAfter: Int64 = 32 * 1024

    /// A started nginx serving TLS with `identity`, and the certificates.
    static func start(
        _ identity: (TLSCertificates) -> TLSCertificates.Identity = \.server, http2: Bool = true,
        requireClientCertificate: Bool = false
    ) async throws -> (NginxPeer, TLSCertificates) {
        let certificates = try await TLSCertificates.shared()
        let nginx = try await NginxPeer(
            httpDirectives: NginxPeerTests.httpDirectives,
            serverDirectives: NginxPeerTests.serverDirectives,
            tls: NginxPeer.TLS(
                identity(certificates), http2: http2,
                clientCA: requireClientCertificate ? certificates.clientCA : nil)
        )
        return (nginx, certificates)
    }

    /// A configuration on `transport` with `tls`; retries allowed but fast, so a test can see that a TLS failure
    /// is never retried (a `.retrying` event) without waiting long when it is.
    static func configuration(
        _ tls: DownloadTask.TLS, transport: DownloadTask.Transport = .libcurl, retries: Int = 0
    ) -> DownloadTask.Configuration {
        var configuration = PeerDownloads.configuration(transport)
        configuration.tls = tls
        configuration.retry = .init(
            maximumRetries: retries, initialDelay: .milliseconds(10), maximumDelay: .milliseconds(20))
        return configuration
    }

    static func trusting(_ certificates: TLSCertificates) -> DownloadTask.TLS {
        DownloadTask.TLS(trust: .pemFile(certificates.caCertificate))
    }

    /// Downloads `path` and returns the error it failed with, and how many retries were announced.
    static func failure(
        of url: URL, with configuration: DownloadTask.Configuration, in downloads: TemporaryDirectory
    ) async throws -> (ResumableError, retries: Int) {
        let task = try DownloadTask(url: url, destination: .directory(downloads.url), configuration: configuration)
        return try await PeerDownloads.failure(of: task)
    }

    // MARK: - Downloads

    @Test("A whole file arrives over HTTP/2 (ALPN) byte for byte, trusting the test CA by file or by directory")
    func http2Download() async throws {
        let (nginx, certificates) = try await Self.start()
        defer { nginx.stop() }
        let content = PeerDownloads.bytes(count: Self.size, seed: 21)
        try nginx.write(content, to: "/data/file.bin")

        for (index, trust) in [
            DownloadTask.TLS.Trust.pemFile(certificates.caCertificate), .pemDirectory(certificates.caDirectory),
        ].enumerated() {
            let downloads = try TemporaryDirectory()
            // Both names in the certificate's subjectAltName: an IP address and a DNS name.
            let url = nginx.url("/data/file.bin", host: index == 0 ? "127.0.0.1" : "localhost")
            let task = try DownloadTask(
                url: url, destination: .directory(downloads.url),
                configuration: Self.configuration(DownloadTask.TLS(trust: trust)))
            let result = try await task.value
            #expect(result.status == 200)
            try expectSameBytes(PeerDownloads.contents(of: result.fileURL), content, "trust \(trust)")
        }
        _ = try await nginx.accessLog(for: "/data/file.bin") { $0.count == 2 }
        let log = nginx.protocolLog(for: "/data/file.bin")
        #expect(log.map(\.protocol) == ["HTTP/2.0", "HTTP/2.0"], "nginx offers h2 in ALPN and curl takes it")
        #expect(log.map(\.status) == [200, 200])
    }

    @Test(
        "Paused mid-transfer and resumed: Range and If-Range work the same over HTTP/2 and HTTP/1.1",
        arguments: [true, false]
    )
    func pauseAndResume(http2: Bool) async throws {
        let (nginx, certificates) = try await Self.start(http2: http2)
        defer { nginx.stop() }
        let downloads = try TemporaryDirectory()
        let content = PeerDownloads.bytes(count: Self.size, seed: http2 ? 22 : 23)
        try nginx.write(content, to: "/slow/file.bin")
        let configuration = Self.configuration(Self.trusting(certificates))

        let task = try DownloadTask(
            url: nginx.url("/slow/file.bin"), destination: .directory(downloads.url), configuration: configuration)
        let paused = try await PeerDownloads.pause(task, atLeast: Self.pauseAfter, in: downloads)
        #expect(paused.offset >= Self.pauseAfter && paused.offset < Int64(Self.size), "paused mid-transfer")
        let etag = try #require(paused.etag)
        let token = try PeerDownloads.handOff(paused, through: downloads)

        let resumed = try DownloadTask.resume(from: token, configuration: configuration)
        let events = PeerDownloads.events(of: resumed)
        let result = try await resumed.value

        #expect(result.status == 206)
        #expect(result.bytesTransferred == Int64(Self.size) - token.offset, "only the missing bytes travel")
        try expectSameBytes(PeerDownloads.contents(of: result.fileURL), content)
        #expect(PeerDownloads.restarts(await events.value).isEmpty)
        // Both requests logged: the paused one (nginx logs it when it sees the client gone) and the resume.
        let ranged = try await nginx.accessLog(for: "/slow/file.bin") {
            $0.count == 2 && $0.contains { !$0.range.isEmpty }
        }.filter { !$0.range.isEmpty }
        #expect(
            ranged == [
                .init(
                    status: 206, uri: "/slow/file.bin", range: "bytes=\(token.offset)-", ifRange: etag,
                    sent: Int64(Self.size) - token.offset)
            ]
        )
        let protocols = nginx.protocolLog(for: "/slow/file.bin")
        #expect(protocols.count == 2)
        #expect(Set(protocols.map(\.protocol)) == [http2 ? "HTTP/2.0" : "HTTP/1.1"])
    }

    // MARK: - Handshake failures

    @Test(
        "A certificate that is untrusted, expired or for another host fails with .tls naming the host, never retried",
        arguments: ["untrusted", "expired", "wrong host"]
    )
    func certificateFailures(kind: String) async throws {
        let (nginx, certificates) = try await Self.start(
            kind == "expired" ? \.expired : kind == "wrong host" ? \.wrongHost : \.server)
        defer { nginx.stop() }
        let downloads = try TemporaryDirectory()
        try nginx.write(PeerDownloads.bytes(count: 1000, seed: 24), to: "/data/file.bin")
        // Untrusted: the default trust (the environment, else the system's store) does not know the test CA.
        let tls = kind == "untrusted" ? DownloadTask.TLS.default : Self.trusting(certificates)

        let (error, retries) = try await Self.failure(
            of: nginx.url("/data/file.bin"), with: Self.configuration(tls, retries: 3), in: downloads)

        #expect(error.code == .tls, "\(error)")
        #expect(!error.isTransient)
        #expect(retries == 0, "a TLS failure is permanent")
        #expect(error.message.contains("127.0.0.1"), "the message names the host: \(error.message)")
        #expect(nginx.accessLog().isEmpty, "no request got through")
    }

    @Test("A public key pin: the right one (digest or key file) downloads, a wrong one fails with .tls")
    func pinning() async throws {
        let (nginx, certificates) = try await Self.start()
        defer { nginx.stop() }
        let content = PeerDownloads.bytes(count: 100_000, seed: 25)
        try nginx.write(content, to: "/data/file.bin")

        for pin in [
            DownloadTask.TLS.PinnedPublicKey(curlSyntax: certificates.serverPin),
            DownloadTask.TLS.PinnedPublicKey(curlSyntax: "\(certificates.otherPin);\(certificates.serverPin)"),
            .file(certificates.serverPublicKey),
        ] {
            let downloads = try TemporaryDirectory()
            var tls = Self.trusting(certificates)
            tls.pinnedPublicKey = pin
            let task = try DownloadTask(
                url: nginx.url("/data/file.bin"), destination: .directory(downloads.url),
                configuration: Self.configuration(tls))
            let result = try await task.value
            try expectSameBytes(PeerDownloads.contents(of: result.fileURL), content, "\(pin)")
        }

        let downloads = try TemporaryDirectory()
        var tls = Self.trusting(certificates)
        tls.pinnedPublicKey = .init(curlSyntax: certificates.otherPin)
        let (error, retries) = try await Self.failure(
            of: nginx.url("/data/file.bin"), with: Self.configuration(tls, retries: 3), in: downloads)
        #expect(error.code == .tls, "\(error)")
        #expect(retries == 0)
    }

    @Test(
        "A server requiring a client certificate: without one nginx answers 400 (permanent); with one, plain or encrypted, the file arrives"
    )
    func clientCertificate() async throws {
        let (nginx, certificates) = try await Self.start(requireClientCertificate: true)
        defer { nginx.stop() }
        let content = PeerDownloads.bytes(count: 100_000, seed: 26)
        try nginx.write(content, to: "/data/file.bin")

        // nginx finishes the handshake without a certificate and answers over HTTP: the error is that answer.
        let downloads = try TemporaryDirectory()
        let (error, retries) = try await Self.failure(
            of: nginx.url("/data/file.bin"), with: Self.configuration(Self.trusting(certificates), retries: 3),
            in: downloads)
        #expect(error.code == .httpStatus && error.httpStatus == 400, "\(error)")
        #expect(retries == 0)

        for client in [
            DownloadTask.TLS.ClientCertificate(
                certificate: certificates.client.certificate, key: certificates.client.key),
            DownloadTask.TLS.ClientCertificate(
                certificate: certificates.client.certificate, key: certificates.encryptedClientKey,
                passphrase: TLSCertificates.clientKeyPassphrase),
        ] {
            let downloads = try TemporaryDirectory()
            var tls = Self.trusting(certificates)
            tls.clientCertificate = client
            let task = try DownloadTask(
                url: nginx.url("/data/file.bin"), destination: .directory(downloads.url),
                configuration: Self.configuration(tls))
            let result = try await task.value
            try expectSameBytes(PeerDownloads.contents(of: result.fileURL), content, "\(client)")
        }
        _ = try await nginx.accessLog(for: "/data/file.bin") { $0.count == 3 }
        #expect(nginx.protocolLog(for: "/data/file.bin").map(\.status) == [400, 200, 200])
    }

    @Test("An encrypted client key with a wrong passphrase fails with .tls, and the passphrase appears nowhere")
    func wrongPassphrase() async throws {
        let (nginx, certificates) = try await Self.start(requireClientCertificate: true)
        defer { nginx.stop() }
        try nginx.write(PeerDownloads.bytes(count: 1000, seed: 27), to: "/data/file.bin")
        let downloads = try TemporaryDirectory()
        var tls = Self.trusting(certificates)
        let secret = "not-the-passphrase-\(UUID().uuidString)"
        tls.clientCertificate = .init(
            certificate: certificates.client.certificate, key: certificates.encryptedClientKey, passphrase: secret)

        let (error, retries) = try await Self.failure(
            of: nginx.url("/data/file.bin"), with: Self.configuration(tls, retries: 3), in: downloads)

        #expect(error.code == .tls, "\(error)")
        #expect(retries == 0)
        #expect(!"\(error)".contains(secret))
        #expect(!"\(tls)".contains(secret) && !String(reflecting: tls.clientCertificate).contains(secret))
        if let token = error.resumeToken {
            let json = token.jsonData()
            #expect(!String(decoding: json, as: UTF8.self).contains(secret))
        }
    }

    // MARK: - The URLSession transport

    @Test("The URLSession transport refuses TLS settings it cannot honor with .tls, before any request")
    func urlSessionRefuses() async throws {
        let (nginx, certificates) = try await Self.start()
        defer { nginx.stop() }
        try nginx.write(PeerDownloads.bytes(count: 1000, seed: 28), to: "/data/file.bin")
        var pinned = DownloadTask.TLS(trust: .system)
        pinned.pinnedPublicKey = .init(curlSyntax: certificates.serverPin)
        let client = DownloadTask.TLS(
            trust: .system,
            clientCertificate: .init(certificate: certificates.client.certificate, key: certificates.client.key))

        for (tls, setting) in [
            (Self.trusting(certificates), "trust in file \(certificates.caCertificate.path)"),
            (pinned, "a pinned public key"), (client, "a client certificate"),
        ] {
            let downloads = try TemporaryDirectory()
            let (error, retries) = try await Self.failure(
                of: nginx.url("/data/file.bin"), with: Self.configuration(tls, transport: .urlSession, retries: 3),
                in: downloads)
            #expect(error.code == .tls, "\(error)")
            #expect(error.message.contains("URLSession transport cannot honor \(setting)"), "\(error.message)")
            #expect(retries == 0)
        }
        #expect(nginx.accessLog().isEmpty, "no request was sent")
    }

    @Test("The URLSession transport with the system's trust meets the untrusted test CA: .tls, never retried")
    func urlSessionUntrusted() async throws {
        let (nginx, _) = try await Self.start()
        defer { nginx.stop() }
        try nginx.write(PeerDownloads.bytes(count: 1000, seed: 29), to: "/data/file.bin")
        let downloads = try TemporaryDirectory()
        let (error, retries) = try await Self.failure(
            of: nginx.url("/data/file.bin"),
            with: Self.configuration(.init(trust: .system), transport: .urlSession, retries: 3), in: downloads)
        #expect(error.code == .tls, "\(error)")
        #expect(retries == 0)
    }
}

/// The TLS configuration itself: curl's environment rule, validation, and what descriptions show.
@Suite("TLS configuration")
struct TLSConfigurationTests {
    typealias Trust = DownloadTask.TLS.Trust

    @Test("The environment is read by curl 7.88's rule: CURL_CA_BUNDLE, else SSL_CERT_DIR, else SSL_CERT_FILE")
    func environmentRule() {
        func resolved(_ environment: [String: String]) -> Trust.Kind {
            Trust.environment.resolved(environment: environment).kind
        }
        let all = ["CURL_CA_BUNDLE": "/b.pem", "SSL_CERT_DIR": "/d", "SSL_CERT_FILE": "/f.pem"]
        #expect(resolved([:]) == .system)
        #expect(resolved(all) == .pem(file: "/b.pem", directory: nil))
        #expect(resolved(all.filter { $0.key != "CURL_CA_BUNDLE" }) == .pem(file: nil, directory: "/d"))
        #expect(resolved(["SSL_CERT_FILE": "/f.pem"]) == .pem(file: "/f.pem", directory: nil))
        // Empty counts as unset, as curl_getenv has it.
        #expect(
            resolved(["CURL_CA_BUNDLE": "", "SSL_CERT_DIR": "", "SSL_CERT_FILE": "/f.pem"])
                == .pem(file: "/f.pem", directory: nil))
        // Other trusts ignore the environment.
        #expect(Trust.system.resolved(environment: all).kind == .system)
        #expect(
            Trust.pemFile(URL(fileURLWithPath: "/x.pem")).resolved(environment: all).kind
                == .pem(file: "/x.pem", directory: nil))
        #expect(Trust.pem(file: nil, directory: nil) == .system)
    }

    @Test("Unreadable files and malformed pins fail at task creation with .invalidRequest naming the path")
    func validation() throws {
        let directory = try TemporaryDirectory()
        let missing = directory.url.appendingPathComponent("missing.pem")
        let cases: [(DownloadTask.TLS, String)] = [
            (.init(trust: .pemFile(missing)), missing.path),
            (.init(trust: .pemFile(directory.url)), "is a directory"),
            (.init(trust: .pemDirectory(missing)), missing.path),
            (.init(clientCertificate: .init(certificate: missing)), "client certificate"),
            (.init(pinnedPublicKey: .init(curlSyntax: "sha256//tooShort=")), "sha256//tooShort="),
            (
                .init(pinnedPublicKey: .init(curlSyntax: "sha256//" + String(repeating: "A", count: 43) + "=;x")),
                "\"x\""
            ),
            (.init(pinnedPublicKey: .init(curlSyntax: missing.path)), missing.path),
            (.init(pinnedPublicKey: .sha256([])), "no sha256//"),
        ]
        for (tls, fragment) in cases {
            var configuration = DownloadTask.Configuration(transport: .libcurl)
            configuration.tls = tls
            let error = #expect(throws: ResumableError.self) {
                try DownloadTask(
                    url: URL(string: "https://127.0.0.1:1/file")!, destination: .directory(directory.url),
                    configuration: configuration)
            }
            #expect(error?.code == .invalidRequest, "\(tls)")
            #expect(error?.message.contains(fragment) == true, "\(error?.message ?? "") should name \(fragment)")
        }
        #expect(directory.contents().isEmpty, "a refused configuration leaves no temporary file")
    }

    @Test("The URLSession transport accepts trust naming the system's own bundle or directory, refuses any other")
    func urlSessionSystemEquivalents() throws {
        func check(_ trust: Trust, url: String = "https://example.invalid/") throws(ResumableError) {
            try URLSessionTransport.checkTLS(
                for: TransportRequest(
                    url: URL(string: url)!, headers: [], idleTimeout: .seconds(1), tls: DownloadTask.TLS(trust: trust)))
        }
        let bundle = try #require(
            URLSessionTransport.systemBundles.first { FileManager.default.fileExists(atPath: $0) },
            "a system CA bundle is installed (ca-certificates)")
        try check(.system)
        try check(.pemFile(URL(fileURLWithPath: bundle)))
        try check(.pemDirectory(URL(fileURLWithPath: "/etc/ssl/certs")))
        let other = URL(fileURLWithPath: "/tmp/some-ca.pem")
        #expect(throws: ResumableError.self) { try check(.pemFile(other)) }
        #expect(throws: ResumableError.self) { try check(.pem(file: URL(fileURLWithPath: bundle), directory: other)) }
        // Plain http: TLS settings do not apply.
        try check(.pemFile(other), url: "http://example.invalid/")
    }

    @Test("curl's HTTP/2 status line ('HTTP/2 206 ', no reason phrase) and lowercase field names make a head")
    func http2Head() throws {
        var collector = HeadCollector()
        func feed(_ line: String) -> HeadCollector.Step {
            Array(line.utf8).withUnsafeBytes { collector.append($0) }
        }
        for line in ["HTTP/2 206 \r\n", "content-range: bytes 10-19/20\r\n", "etag: \"abc\"\r\n"] {
            guard case .incomplete = feed(line) else {
                Issue.record("\(line.debugDescription) did not continue the head")
                return
            }
        }
        guard case .complete(let head) = feed("\r\n") else {
            Issue.record("the empty line did not complete the head")
            return
        }
        #expect(head.status == 206)
        #expect(head.value("Content-Range") == "bytes 10-19/20")
        #expect(head.value("ETag") == "\"abc\"")
    }

    @Test("A passphrase never appears in a description")
    func passphraseRedacted() {
        let client = DownloadTask.TLS.ClientCertificate(
            certificate: URL(fileURLWithPath: "/c.pem"), key: URL(fileURLWithPath: "/k.pem"), passphrase: "hunter2")
        #expect(!client.description.contains("hunter2"))
        #expect(client.description.contains("<redacted>"))
        let tls = DownloadTask.TLS(clientCertificate: client)
        #expect(!"\(tls)".contains("hunter2"))
    }
}
