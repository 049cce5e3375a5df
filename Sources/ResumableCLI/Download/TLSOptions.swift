import Foundation
import Resumable

/// The TLS options `get` and `resume` share, with curl's names and meanings: `--cacert FILE`, `--capath DIR`,
/// `--cert FILE`, `--key FILE`, `--pass PHRASE`, `--pinnedpubkey HASHES|FILE`.
///
/// Without `--cacert` and `--capath`, trust comes from the environment as curl reads it (`CURL_CA_BUNDLE`, else
/// `SSL_CERT_DIR`, else `SSL_CERT_FILE`), else from the system's store. None of these is written into a token:
/// `resume` takes them again. The passphrase is never printed.
struct TLSOptions: Sendable {
    /// The arguments, in help order.
    static let arguments: [ArgumentSpec] = [
        .option(
            "cacert", value: "file",
            help: "Trust the CA certificates in this PEM file (and --capath's, if given) instead of the system's store "
                + "and of CURL_CA_BUNDLE, SSL_CERT_DIR and SSL_CERT_FILE."),
        .option(
            "capath", value: "dir",
            help: "Trust the CA certificates in this directory of PEM files named by hash (openssl rehash) instead "
                + "of the system's store; with --cacert, both."),
        .option(
            "cert", short: "E", value: "file",
            help: "Present this client certificate (PEM; it may hold the key too) to a server that asks for one."),
        .option("key", value: "file", help: "The private key (PEM) of --cert, when it is in a file of its own."),
        .option(
            "pass", value: "phrase",
            help: "The passphrase of an encrypted --key. Never printed, never written into a token."),
        .option(
            "pinnedpubkey", value: "hashes|file",
            help: "The server's public key must be this one: 'sha256//<base64>' digests separated by ';', or a PEM "
                + "or DER public key file. Checked on top of the certificate chain."),
    ]

    /// `--cacert`, `--capath`: the trust they name, or `nil` for the environment's.
    var trust: DownloadTask.TLS.Trust?
    /// `--cert`, `--key`, `--pass`.
    var clientCertificate: DownloadTask.TLS.ClientCertificate?
    /// `--pinnedpubkey`.
    var pinnedPublicKey: DownloadTask.TLS.PinnedPublicKey?

    /// Reads the options from a parse. Files are checked when the download is created, naming the path.
    init(_ parsed: ParsedArguments) throws(UsageError) {
        func path(_ name: String) throws(UsageError) -> URL? {
            guard let value = parsed.value(name) else { return nil }
            guard !value.isEmpty else { throw UsageError("option '--\(name)' needs a path, not ''") }
            return URL(fileURLWithPath: value)
        }
        let caFile = try path("cacert")
        let caDirectory = try path("capath")
        if caFile != nil || caDirectory != nil {
            trust = .pem(file: caFile, directory: caDirectory)
        }
        let key = try path("key")
        let passphrase = parsed.value("pass")
        if let certificate = try path("cert") {
            clientCertificate = .init(certificate: certificate, key: key, passphrase: passphrase)
        } else if key != nil || passphrase != nil {
            throw UsageError("options '--key' and '--pass' need '--cert'")
        }
        if let pin = parsed.value("pinnedpubkey") {
            guard !pin.isEmpty else { throw UsageError("option '--pinnedpubkey' needs sha256// digests or a file") }
            pinnedPublicKey = .init(curlSyntax: pin)
        }
    }

    /// Sets what these options say on `configuration`.
    func apply(to configuration: inout DownloadTask.Configuration) {
        configuration.tls = DownloadTask.TLS(
            trust: trust ?? .environment, clientCertificate: clientCertificate, pinnedPublicKey: pinnedPublicKey)
    }
}
