import Foundation
import Testing

/// `get` over TLS against a real nginx (HTTP/2) with the tests' own CA: `--cacert`, `--capath`, `--cert`/`--key`,
/// `--pinnedpubkey`, curl's environment variables, and exit status 1 with the host named when a handshake fails.
@Suite(
    "TLS options",
    .enabled(
        if: TLSCertificates.testsRun,
        "nginx or openssl is not installed (apt-get install -y nginx-light openssl): skipped locally; under CI=true these tests fail"
    )
)
struct TLSTests {
    static let content = Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })

    /// An nginx serving ``content`` at `/file.bin` over TLS with the test server certificate.
    static func start(requireClientCertificate: Bool = false) async throws -> (NginxPeer, TLSCertificates) {
        let certificates = try await TLSCertificates.shared()
        let nginx = try await NginxPeer(
            tls: NginxPeer.TLS(
                certificates.server, clientCA: requireClientCertificate ? certificates.clientCA : nil))
        try nginx.write(content, to: "/file.bin")
        return (nginx, certificates)
    }

    /// Runs `get` for `/file.bin` with `arguments` and, with `environment`, curl's variables cleared first so the
    /// developer's own settings do not leak in.
    static func get(
        _ nginx: NginxPeer, _ arguments: [String], environment: [String: String] = [:], in scratch: ScratchDirectory
    ) async throws -> CLIResult {
        var variables = ["CURL_CA_BUNDLE": "", "SSL_CERT_DIR": "", "SSL_CERT_FILE": ""]
        variables.merge(environment) { $1 }
        return try await CLIProcess.run(
            ["get", nginx.url("/file.bin").absoluteString, "-o", "out.bin", "--retries", "3", "--quiet"] + arguments,
            in: scratch.url, environment: variables)
    }

    static func downloaded(_ scratch: ScratchDirectory) -> Data? {
        try? Data(contentsOf: scratch.file("out.bin"))
    }

    @Test("--cacert and --capath trust the test CA: the file arrives over HTTP/2")
    func cacertAndCapath() async throws {
        let (nginx, certificates) = try await Self.start()
        defer { nginx.stop() }
        for arguments in [["--cacert", certificates.caCertificate.path], ["--capath", certificates.caDirectory.path]] {
            let scratch = try ScratchDirectory()
            let result = try await Self.get(nginx, arguments, in: scratch)
            #expect(result.exitCode == 0, "\(arguments): \(result)")
            expectSameBytes(Self.downloaded(scratch), Self.content)
        }
        _ = try await nginx.accessLog(for: "/file.bin") { $0.count == 2 }
        #expect(nginx.protocolLog(for: "/file.bin").map(\.protocol) == ["HTTP/2.0", "HTTP/2.0"])
    }

    @Test(
        "Without trust in the CA the download fails at once: exit 1, the host and the reason named, no retry, no file")
    func untrusted() async throws {
        let (nginx, _) = try await Self.start()
        defer { nginx.stop() }
        let scratch = try ScratchDirectory()
        let result = try await Self.get(nginx, [], in: scratch)
        #expect(result.exitCode == 1, "\(result)")
        #expect(result.stderr.contains("127.0.0.1"), "the message names the host: \(result.stderr)")
        #expect(result.stderr.localizedCaseInsensitiveContains("certificate"), "and the reason: \(result.stderr)")
        #expect(!result.stderr.contains("Retrying"), "a TLS failure is not retried: \(result.stderr)")
        #expect(Self.downloaded(scratch) == nil)
        #expect(nginx.accessLog().isEmpty)
    }

    @Test("curl's environment: SSL_CERT_FILE; SSL_CERT_DIR wins over SSL_CERT_FILE; CURL_CA_BUNDLE wins over both")
    func environment() async throws {
        let (nginx, certificates) = try await Self.start()
        defer { nginx.stop() }
        let empty = try ScratchDirectory()
        let bogus = empty.file("no-such-bundle.pem").path
        let ca = certificates.caCertificate.path
        let cases: [([String: String], Bool)] = [
            (["SSL_CERT_FILE": ca], true),
            // SSL_CERT_DIR is used alone: SSL_CERT_FILE is then ignored, whatever it names.
            (["SSL_CERT_DIR": certificates.caDirectory.path, "SSL_CERT_FILE": bogus], true),
            (["SSL_CERT_DIR": empty.url.path, "SSL_CERT_FILE": ca], false),
            (["CURL_CA_BUNDLE": ca, "SSL_CERT_DIR": empty.url.path, "SSL_CERT_FILE": bogus], true),
        ]
        for (environment, succeeds) in cases {
            let scratch = try ScratchDirectory()
            let result = try await Self.get(nginx, [], environment: environment, in: scratch)
            #expect(result.exitCode == (succeeds ? 0 : 1), "\(environment): \(result)")
            #expect((Self.downloaded(scratch) == Self.content) == succeeds)
        }
        // --cacert overrides the environment, as in curl.
        let scratch = try ScratchDirectory()
        let result = try await Self.get(
            nginx, ["--cacert", ca], environment: ["CURL_CA_BUNDLE": bogus], in: scratch)
        #expect(result.exitCode == 0, "\(result)")
    }

    @Test("A variable naming a missing file fails at once with exit 1, naming the variable and the path")
    func environmentMissingFile() async throws {
        let (nginx, _) = try await Self.start()
        defer { nginx.stop() }
        let scratch = try ScratchDirectory()
        let missing = scratch.file("missing.pem").path
        let result = try await Self.get(nginx, [], environment: ["SSL_CERT_FILE": missing], in: scratch)
        #expect(result.exitCode == 1, "\(result)")
        #expect(result.stderr.contains("SSL_CERT_FILE") && result.stderr.contains(missing), "\(result.stderr)")
        #expect(nginx.accessLog().isEmpty)
    }

    @Test("A server that requires a client certificate: --cert and --key (or --pass for an encrypted key) get the file")
    func clientCertificate() async throws {
        let (nginx, certificates) = try await Self.start(requireClientCertificate: true)
        defer { nginx.stop() }
        let cacert = ["--cacert", certificates.caCertificate.path]

        let without = try ScratchDirectory()
        let refused = try await Self.get(nginx, cacert, in: without)
        #expect(refused.exitCode == 1, "\(refused)")
        #expect(refused.stderr.contains("400"), "nginx answers 400 without a certificate: \(refused.stderr)")

        let withKey = try ScratchDirectory()
        let plain = try await Self.get(
            nginx,
            cacert + ["--cert", certificates.client.certificate.path, "--key", certificates.client.key.path],
            in: withKey)
        #expect(plain.exitCode == 0, "\(plain)")
        expectSameBytes(Self.downloaded(withKey), Self.content)

        let withPassphrase = try ScratchDirectory()
        let encrypted = try await Self.get(
            nginx,
            cacert + [
                "-E", certificates.client.certificate.path, "--key", certificates.encryptedClientKey.path, "--pass",
                TLSCertificates.clientKeyPassphrase, "--json",
            ],
            in: withPassphrase)
        #expect(encrypted.exitCode == 0, "\(encrypted)")
        expectSameBytes(Self.downloaded(withPassphrase), Self.content)
        #expect(!(encrypted.stdout + encrypted.stderr).contains(TLSCertificates.clientKeyPassphrase))
    }

    @Test("--pinnedpubkey: the server's key passes, another key fails with exit 1")
    func pinnedPublicKey() async throws {
        let (nginx, certificates) = try await Self.start()
        defer { nginx.stop() }
        let cacert = ["--cacert", certificates.caCertificate.path]
        for (pin, succeeds) in [
            (certificates.serverPin, true), (certificates.serverPublicKey.path, true), (certificates.otherPin, false),
        ] {
            let scratch = try ScratchDirectory()
            let result = try await Self.get(nginx, cacert + ["--pinnedpubkey", pin], in: scratch)
            #expect(result.exitCode == (succeeds ? 0 : 1), "\(pin): \(result)")
            if !succeeds {
                #expect(result.stderr.contains("127.0.0.1"), "\(result.stderr)")
                #expect(!result.stderr.contains("Retrying"))
            }
        }
    }

    @Test(
        "Malformed TLS options: --key without --cert is a usage error (64); a missing --cacert file exits 1 naming it")
    func malformedOptions() async throws {
        let scratch = try ScratchDirectory()
        let url = "https://127.0.0.1:1/file.bin"
        let usage = try await CLIProcess.run(["get", url, "--key", "k.pem"], in: scratch.url)
        #expect(usage.exitCode == 64, "\(usage)")
        let missing = scratch.file("missing.pem").path
        let result = try await CLIProcess.run(["get", url, "--cacert", missing], in: scratch.url)
        #expect(result.exitCode == 1, "\(result)")
        #expect(result.stderr.contains(missing), "\(result.stderr)")
        let pin = try await CLIProcess.run(["get", url, "--pinnedpubkey", "sha256//nope"], in: scratch.url)
        #expect(pin.exitCode == 1, "\(pin)")
        #expect(pin.stderr.contains("sha256//nope"), "\(pin.stderr)")
        #expect(scratch.partialFiles().isEmpty)
    }
}
