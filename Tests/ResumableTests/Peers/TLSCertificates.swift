import Foundation
import LoopbackServer
import ProcessSpawning
import Synchronization

/// Certificates for the TLS tests, made with the `openssl` command once per test process and shared by every test
/// (``shared()``): a CA and the certificates it signs, a second CA for client certificates, and the pins of the
/// server's key.
///
/// Every key is a P-256 EC key (fast to make). The files live in a directory of their own under the system's
/// temporary directory, named by the properties below; they are never changed after ``shared()`` returns, and removed
/// when the test process exits.
///
/// ```swift
/// let certificates = try await TLSCertificates.shared()
/// let nginx = try await NginxPeer(tls: .init(certificates.server))
/// var tls = DownloadTask.TLS(trust: .pemFile(certificates.caCertificate))
/// ```
struct TLSCertificates: Sendable {
    /// A certificate and its private key (PEM files).
    struct Identity: Sendable, Hashable {
        /// The certificate (PEM).
        let certificate: URL
        /// Its private key (PEM, unencrypted).
        let key: URL
    }

    /// The directory holding every file.
    let directory: URL
    /// The test CA's certificate (PEM): the trust root for every server certificate below.
    let caCertificate: URL
    /// A directory holding only the test CA's certificate, under its subject-hash name (`openssl rehash`): what
    /// curl's `--capath` expects.
    let caDirectory: URL
    /// A valid server certificate for `localhost`, `127.0.0.1` and `::1`, signed by the test CA.
    let server: Identity
    /// A valid certificate for `wrong.example.invalid` only, signed by the test CA: a host name mismatch on loopback.
    let wrongHost: Identity
    /// A certificate for the same names as ``server``, signed by the test CA, valid only in January 2020.
    let expired: Identity
    /// The certificate of a second CA that signs client certificates only (nginx's `ssl_client_certificate`).
    let clientCA: URL
    /// A client certificate (`CN=resumable-test-client`, extended key usage clientAuth), signed by ``clientCA``.
    let client: Identity
    /// ``client``'s private key again, encrypted with AES-256 under ``clientKeyPassphrase``.
    let encryptedClientKey: URL
    /// The server key's public key (PEM `PUBLIC KEY`): a pin as a file, as curl's `--pinnedpubkey FILE` takes it.
    let serverPublicKey: URL
    /// The pin of ``server``'s (and ``wrongHost``'s and ``expired``'s) public key in curl's form: `sha256//` and
    /// the base64 SHA-256 of the DER SubjectPublicKeyInfo.
    let serverPin: String
    /// The pin of an unrelated key (the client's): a pin the server never matches.
    let otherPin: String

    /// The passphrase ``encryptedClientKey`` is encrypted under.
    static let clientKeyPassphrase = "correct horse battery staple"

    /// The `openssl` binary: `RESUMABLE_TEST_OPENSSL`, else `/usr/bin/openssl` or the like.
    static let executable = PeerEnvironment.executable(
        named: "openssl",
        overriddenBy: "RESUMABLE_TEST_OPENSSL",
        candidates: ["/usr/bin/openssl", "/usr/local/bin/openssl", "/opt/homebrew/bin/openssl"]
    )

    /// Whether TLS tests against nginx run: when both nginx and openssl are installed, and always in CI, where a
    /// missing one fails.
    static var testsRun: Bool { (NginxPeer.executable != nil && executable != nil) || PeerEnvironment.isCI }

    private static let cache = Mutex<Task<TLSCertificates, any Error>?>(nil)

    /// The directory ``make()`` made, which the process removes as it exits (`atexit`): every test may use the files
    /// until then, so no test can remove them.
    private static let madeDirectory = Mutex<URL?>(nil)

    /// The certificates of this process, made on first use (on a thread of its own) and then reused.
    ///
    /// - Throws: ``PeerError`` when openssl is missing or one of its commands fails (then every later call throws
    ///   the same error).
    static func shared() async throws -> TLSCertificates {
        let task = cache.withLock { cache in
            if let cache { return cache }
            let made = Task {
                try await withCheckedThrowingContinuation { continuation in
                    let thread = Thread { continuation.resume(with: Result { try make() }) }
                    thread.name = "TLSCertificates.make"
                    thread.start()
                }
            }
            cache = made
            return made
        }
        return try await task.value
    }

    // MARK: - Making them

    /// Runs every openssl command, blocking: only on a thread of its own.
    private static func make() throws -> TLSCertificates {
        guard let executable else {
            throw PeerEnvironment.missing(
                "openssl", variable: "RESUMABLE_TEST_OPENSSL", install: "apt-get install -y openssl")
        }
        let directory = URL(fileURLWithPath: NSTemporaryDirectory(), isDirectory: true)
            .appendingPathComponent("resumable-tls-\(UUID().uuidString)", isDirectory: true)
        let database = directory.appendingPathComponent("ca-database", isDirectory: true)
        let caDirectory = directory.appendingPathComponent("ca-directory", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        madeDirectory.withLock { $0 = directory }
        atexit {
            if let directory = TLSCertificates.madeDirectory.withLock({ $0 }) {
                try? FileManager.default.removeItem(at: directory)
            }
        }
        for path in [database, caDirectory] {
            try FileManager.default.createDirectory(at: path, withIntermediateDirectories: true)
        }
        func file(_ name: String) -> URL { directory.appendingPathComponent(name) }
        func path(_ name: String) -> String { file(name).path }
        func write(_ text: String, to name: String) throws { try Data(text.utf8).write(to: file(name)) }
        @discardableResult
        func openssl(_ arguments: [String]) throws -> Data {
            try run(executable, arguments, in: directory)
        }
        let curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        func makeCA(_ name: String, subject: String) throws {
            try openssl(
                ["req", "-x509"] + curve + [
                    "-keyout", path("\(name).key"), "-out", path("\(name).pem"), "-days", "3650", "-subj", subject,
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                ])
        }
        func makeRequest(_ name: String, subject: String) throws {
            try openssl(
                ["req", "-new"] + curve + [
                    "-keyout", path("\(name).key"), "-out", path("\(name).csr"), "-subj", subject,
                ])
        }
        func extensions(_ name: String, usage: String, names: String) throws {
            try write(
                """
                basicConstraints = CA:FALSE
                keyUsage = critical, digitalSignature
                extendedKeyUsage = \(usage)
                subjectAltName = \(names)

                """, to: "\(name).ext")
        }
        /// `openssl ca`, which (unlike `x509 -req` in openssl 3.0) takes explicit validity dates.
        func sign(_ name: String, by ca: String, startDate: String? = nil, endDate: String? = nil) throws {
            var dates = ["-days", "825"]
            if let startDate, let endDate { dates = ["-startdate", startDate, "-enddate", endDate] }
            try openssl(
                [
                    "ca", "-batch", "-config", path("ca.cnf"), "-cert", path("\(ca).pem"), "-keyfile",
                    path("\(ca).key"),
                    "-in", path("\(name).csr"), "-out", path("\(name).pem"), "-extfile", path("\(name).ext"), "-notext",
                ] + dates)
        }
        /// curl's pin of the public key in `keyFile`: `sha256//` + base64(SHA-256(DER SubjectPublicKeyInfo)).
        func pin(of keyFile: String) throws -> String {
            let der = file("\(keyFile).pub.der")
            try openssl(["pkey", "-in", path(keyFile), "-pubout", "-outform", "DER", "-out", der.path])
            let digest = try openssl(["dgst", "-sha256", "-binary", der.path])
            guard digest.count == 32 else { throw PeerError(description: "openssl dgst printed \(digest.count) bytes") }
            return "sha256//" + digest.base64EncodedString()
        }

        try write(
            """
            [ca]
            default_ca = test_ca
            [test_ca]
            database = \(database.path)/index.txt
            new_certs_dir = \(database.path)
            serial = \(database.path)/serial
            default_md = sha256
            policy = policy_any
            unique_subject = no
            email_in_dn = no
            copy_extensions = none
            [policy_any]
            commonName = supplied

            """, to: "ca.cnf")
        try Data().write(to: database.appendingPathComponent("index.txt"))
        try write("1000\n", to: "ca-database/serial")

        try makeCA("ca", subject: "/CN=Resumable Test CA")
        try makeCA("client-ca", subject: "/CN=Resumable Test Client CA")

        let loopbackNames = "DNS:localhost, IP:127.0.0.1, IP:::1"
        try makeRequest("server", subject: "/CN=localhost")
        try extensions("server", usage: "serverAuth", names: loopbackNames)
        try sign("server", by: "ca")

        // The expired certificate reuses the server's key and names; only its dates differ.
        try FileManager.default.copyItem(at: file("server.csr"), to: file("expired.csr"))
        try FileManager.default.copyItem(at: file("server.key"), to: file("expired.key"))
        try extensions("expired", usage: "serverAuth", names: loopbackNames)
        try sign("expired", by: "ca", startDate: "20200101000000Z", endDate: "20200201000000Z")

        try FileManager.default.copyItem(at: file("server.csr"), to: file("wrong-host.csr"))
        try FileManager.default.copyItem(at: file("server.key"), to: file("wrong-host.key"))
        try extensions("wrong-host", usage: "serverAuth", names: "DNS:wrong.example.invalid")
        try sign("wrong-host", by: "ca")

        try makeRequest("client", subject: "/CN=resumable-test-client")
        try extensions("client", usage: "clientAuth", names: "DNS:resumable-test-client")
        try sign("client", by: "client-ca")
        try openssl([
            "pkey", "-in", path("client.key"), "-aes256", "-passout", "pass:\(clientKeyPassphrase)",
            "-out", path("client-encrypted.key"),
        ])

        try openssl(["pkey", "-in", path("server.key"), "-pubout", "-out", path("server-public.pem")])
        try FileManager.default.copyItem(at: file("ca.pem"), to: caDirectory.appendingPathComponent("ca.pem"))
        try openssl(["rehash", caDirectory.path])

        return TLSCertificates(
            directory: directory,
            caCertificate: file("ca.pem"),
            caDirectory: caDirectory,
            server: Identity(certificate: file("server.pem"), key: file("server.key")),
            wrongHost: Identity(certificate: file("wrong-host.pem"), key: file("wrong-host.key")),
            expired: Identity(certificate: file("expired.pem"), key: file("expired.key")),
            clientCA: file("client-ca.pem"),
            client: Identity(certificate: file("client.pem"), key: file("client.key")),
            encryptedClientKey: file("client-encrypted.key"),
            serverPublicKey: file("server-public.pem"),
            serverPin: try pin(of: "server.key"),
            otherPin: try pin(of: "client.key")
        )
    }

    /// Runs `executable` with `arguments` and returns its standard output; throws with its output when it fails.
    private static func run(_ executable: URL, _ arguments: [String], in directory: URL) throws -> Data {
        let output = directory.appendingPathComponent("openssl-output-\(UUID().uuidString)")
        let errors = directory.appendingPathComponent("openssl-errors-\(UUID().uuidString)")
        for log in [output, errors] { _ = FileManager.default.createFile(atPath: log.path, contents: nil) }
        defer { for log in [output, errors] { try? FileManager.default.removeItem(at: log) } }
        let outputHandle = try FileHandle(forWritingTo: output)
        let errorHandle = try FileHandle(forWritingTo: errors)
        let process = try SpawnedProcess(
            executable: executable, arguments: arguments, currentDirectory: directory, standardInput: .nullDevice,
            standardOutput: .handle(outputHandle), standardError: .handle(errorHandle))
        try? outputHandle.close()
        try? errorHandle.close()
        let termination = process.waitUntilExit()
        let printed = (try? Data(contentsOf: output)) ?? Data()
        guard termination == .exited(0) else {
            let message = (try? String(contentsOf: errors, encoding: .utf8)) ?? ""
            throw PeerError(
                description: "openssl \(arguments.joined(separator: " ")) failed (\(termination)):\n\(message)")
        }
        return printed
    }
}
