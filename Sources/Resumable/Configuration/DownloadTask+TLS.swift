import Foundation
import Synchronization

extension DownloadTask {
    /// How TLS (https) connections are verified and authenticated.
    ///
    /// The server's certificate is always verified, chain and host name; nothing here turns that off. What can be
    /// chosen is what is trusted (``trust``), a client certificate to present (``clientCertificate``), and a public
    /// key the server must have on top of a trusted chain (``pinnedPublicKey``).
    ///
    /// The default, ``Trust/environment``, reads the environment as curl's command-line tool does, once, when a task
    /// is created or resumed (see ``Trust/environment``).
    ///
    /// Only the libcurl transport (the one ``Transport/automatic`` picks whenever libcurl loads) can honor a setting
    /// other than the system's trust store: the `URLSession` transport fails such an https request with
    /// ``ResumableError/Code/tls`` rather than ignoring it. (Trust naming the system's own CA bundle or
    /// `/etc/ssl/certs`, as containers often set `SSL_CERT_FILE` and the like, is the system's store and passes.)
    ///
    /// A failed handshake (an untrusted, expired or misnamed certificate, a key that does not match the pin, a
    /// client key that cannot be used) ends the task with ``ResumableError/Code/tls`` and is never retried. See
    /// <doc:TLS>.
    public struct TLS: Hashable, Sendable, CustomStringConvertible {
        /// The certificates a server's chain must lead to.
        public var trust: Trust
        /// The certificate presented when the server asks for one; `nil` for none.
        public var clientCertificate: ClientCertificate?
        /// The public key the server's certificate must carry, besides a trusted chain; `nil` for no pinning.
        public var pinnedPublicKey: PinnedPublicKey?

        /// Creates a TLS configuration.
        public init(
            trust: Trust = .environment, clientCertificate: ClientCertificate? = nil,
            pinnedPublicKey: PinnedPublicKey? = nil
        ) {
            self.trust = trust
            self.clientCertificate = clientCertificate
            self.pinnedPublicKey = pinnedPublicKey
        }

        /// Trust as the environment says (else the system's store), no client certificate, no pinning.
        public static let `default` = TLS()

        /// The trust, the client certificate's paths (never its passphrase) and the pin.
        public var description: String {
            var parts = ["trust \(trust)"]
            if let clientCertificate { parts.append("client \(clientCertificate)") }
            if let pinnedPublicKey { parts.append("\(pinnedPublicKey)") }
            return parts.joined(separator: ", ")
        }

        /// Resolves ``Trust/environment`` into what the environment names now, and checks that every file named is
        /// readable and every pin well formed. Called when a task is created or resumed, so a bad configuration fails
        /// at once and the environment is read once per task.
        ///
        /// - Throws: ``ResumableError/Code/invalidRequest`` naming the setting (or environment variable) and path at
        ///   fault: a file or directory that is missing or unreadable, a pin that is not `sha256//` and 44 base64
        ///   characters.
        mutating func validate() throws(ResumableError) {
            trust = trust.resolved(environment: ProcessEnvironment.values(Trust.variableNames))
            try trust.check()
            try clientCertificate?.check()
            try pinnedPublicKey?.check()
        }
    }
}

// MARK: - Trust

extension DownloadTask.TLS {
    /// The certificates (CAs) a server's certificate chain must lead to.
    public struct Trust: Hashable, Sendable, CustomStringConvertible {
        enum Kind: Hashable, Sendable {
            case environment
            case system
            /// Exactly these locations; `nil` for none (never the system's).
            case pem(file: String?, directory: String?)
        }

        let kind: Kind
        /// The environment variable ``environment`` was resolved from, for messages.
        let variable: String?

        init(_ kind: Kind, variable: String? = nil) {
            self.kind = kind
            self.variable = variable
        }

        /// What the environment names, chosen exactly as curl's command-line tool (7.88) chooses when given neither
        /// `--cacert` nor `--capath`: `CURL_CA_BUNDLE` (a PEM file) when set; otherwise `SSL_CERT_DIR` (a PEM
        /// directory) when set; otherwise `SSL_CERT_FILE` (a PEM file) when set; otherwise the ``system`` store. A
        /// variable set to the empty string counts as unset, as in curl; only one variable is ever used, so
        /// `SSL_CERT_FILE` is ignored while `SSL_CERT_DIR` is set.
        ///
        /// The environment is read when a task is created or resumed, and that choice holds for every request of
        /// the task. A location named there replaces the system store, as ``pemFile(_:)`` and
        /// ``pemDirectory(_:)`` do. The default.
        public static let environment = Trust(.environment)

        /// The system's trust store, whatever the environment says: libcurl's built-in CA bundle and directory
        /// (on Debian `/etc/ssl/certs/ca-certificates.crt` and `/etc/ssl/certs`).
        public static let system = Trust(.system)

        /// The CA certificates in one PEM file (several may be concatenated), and no others: the system store is
        /// not consulted. curl's `--cacert`.
        public static func pemFile(_ file: URL) -> Trust {
            Trust(.pem(file: file.standardizedFileURL.path, directory: nil))
        }

        /// The CA certificates in a directory of PEM files named by their subject hash (prepared with
        /// `openssl rehash`), and no others. curl's `--capath`.
        public static func pemDirectory(_ directory: URL) -> Trust {
            Trust(.pem(file: nil, directory: directory.standardizedFileURL.path))
        }

        /// The CA certificates in a PEM file and in a hashed PEM directory together, and no others; curl's
        /// `--cacert` and `--capath` given together. At least one must be given; with neither, the ``system`` store.
        public static func pem(file: URL?, directory: URL?) -> Trust {
            guard file != nil || directory != nil else { return .system }
            return Trust(.pem(file: file?.standardizedFileURL.path, directory: directory?.standardizedFileURL.path))
        }

        public var description: String {
            switch kind {
            case .environment: return "environment"
            case .system: return variable.map { "system (\($0) unset)" } ?? "system"
            case .pem(let file, let directory):
                let parts = [file.map { "file \($0)" }, directory.map { "directory \($0)" }].compactMap { $0 }
                return parts.joined(separator: " and ") + (variable.map { " (from \($0))" } ?? "")
            }
        }

        /// The variables ``resolved(environment:)`` reads.
        static let variableNames = ["CURL_CA_BUNDLE", "SSL_CERT_DIR", "SSL_CERT_FILE"]

        /// ``environment`` made concrete by curl's rule; any other trust as it is.
        func resolved(environment: [String: String]) -> Trust {
            guard kind == .environment else { return self }
            func value(_ name: String) -> String? {
                guard let value = environment[name], !value.isEmpty else { return nil }
                return value
            }
            if let bundle = value("CURL_CA_BUNDLE") {
                return Trust(.pem(file: bundle, directory: nil), variable: "CURL_CA_BUNDLE")
            }
            if let directory = value("SSL_CERT_DIR") {
                return Trust(.pem(file: nil, directory: directory), variable: "SSL_CERT_DIR")
            }
            if let file = value("SSL_CERT_FILE") {
                return Trust(.pem(file: file, directory: nil), variable: "SSL_CERT_FILE")
            }
            return Trust(.system)
        }

        /// The file and directory to hand a TLS library, `nil` meaning none; `system` when the built-in store is
        /// meant. ``environment`` is resolved first from the current environment.
        var locations: (system: Bool, file: String?, directory: String?) {
            switch resolved(environment: ProcessEnvironment.values(Self.variableNames)).kind {
            case .environment, .system: return (true, nil, nil)
            case .pem(let file, let directory): return (false, file, directory)
            }
        }

        func check() throws(ResumableError) {
            guard case .pem(let file, let directory) = kind else { return }
            let setting = variable ?? "trust"
            if let file { try TLSFiles.checkReadableFile(file, setting: "\(setting) CA file") }
            // Like curl's CAPATH, a directory may be a `:`-separated list.
            for path in directory?.split(separator: ":").map(String.init) ?? [] {
                try TLSFiles.checkReadableDirectory(path, setting: "\(setting) CA directory")
            }
        }
    }
}

// MARK: - Client certificate

extension DownloadTask.TLS {
    /// A certificate (and its private key) presented to a server that asks for one: curl's `--cert` and `--key`.
    ///
    /// The passphrase is never part of a description, a log line or a token; only the paths are.
    public struct ClientCertificate: Hashable, Sendable, CustomStringConvertible, CustomDebugStringConvertible,
        CustomReflectable
    {
        /// The certificate, PEM; it may also hold the private key.
        public var certificate: URL
        /// The private key, PEM; `nil` when it is in ``certificate``'s file.
        public var key: URL?
        /// The passphrase of an encrypted key; `nil` for an unencrypted one.
        public var passphrase: String?

        /// Creates a client certificate from PEM files.
        public init(certificate: URL, key: URL? = nil, passphrase: String? = nil) {
            self.certificate = certificate
            self.key = key
            self.passphrase = passphrase
        }

        public var description: String {
            var text = "certificate \(certificate.path)"
            if let key { text += ", key \(key.path)" }
            if passphrase != nil { text += ", passphrase <redacted>" }
            return text
        }

        public var debugDescription: String { "ClientCertificate(\(description))" }

        /// The paths only, so `dump` and debuggers never show the passphrase either.
        public var customMirror: Mirror {
            Mirror(
                self,
                children: ["certificate": certificate, "key": key as Any, "hasPassphrase": passphrase != nil],
                displayStyle: .struct)
        }

        func check() throws(ResumableError) {
            try TLSFiles.checkReadableFile(certificate.path, setting: "client certificate")
            if let key { try TLSFiles.checkReadableFile(key.path, setting: "client key") }
        }
    }
}

// MARK: - Pinned public key

extension DownloadTask.TLS {
    /// The public key a server's certificate must carry: curl's `--pinnedpubkey`.
    ///
    /// Pinning comes on top of verification: the chain must still be trusted and the host name match.
    public struct PinnedPublicKey: Hashable, Sendable, CustomStringConvertible {
        enum Kind: Hashable, Sendable {
            /// `sha256//` and a base64 SHA-256 digest of a DER SubjectPublicKeyInfo, each, as given.
            case sha256([String])
            /// A PEM or DER public key file.
            case file(String)
        }

        let kind: Kind

        /// Any of these SHA-256 digests (base64 of the digest of the DER SubjectPublicKeyInfo, as
        /// `openssl pkey -pubout -outform DER | openssl dgst -sha256 -binary | base64` prints it) matches.
        public static func sha256(_ digests: [String]) -> PinnedPublicKey {
            PinnedPublicKey(kind: .sha256(digests.map { "sha256//" + $0 }))
        }

        /// The public key in a PEM or DER file.
        public static func file(_ file: URL) -> PinnedPublicKey {
            PinnedPublicKey(kind: .file(file.standardizedFileURL.path))
        }

        /// A pin in curl's `--pinnedpubkey` syntax: `sha256//` digests separated by `;`
        /// (`sha256//AAA…=;sha256//BBB…=`), or else the path of a key file.
        public init(curlSyntax text: String) {
            if text.hasPrefix("sha256//") {
                kind = .sha256(text.split(separator: ";", omittingEmptySubsequences: false).map(String.init))
            } else {
                kind = .file(URL(fileURLWithPath: text).standardizedFileURL.path)
            }
        }

        private init(kind: Kind) {
            self.kind = kind
        }

        /// The value for curl's `CURLOPT_PINNEDPUBLICKEY`.
        var curlValue: String {
            switch kind {
            case .sha256(let pins): return pins.joined(separator: ";")
            case .file(let path): return path
            }
        }

        public var description: String { "pinned public key " + curlValue }

        func check() throws(ResumableError) {
            switch kind {
            case .file(let path):
                try TLSFiles.checkReadableFile(path, setting: "pinned public key")
            case .sha256(let pins):
                guard !pins.isEmpty else {
                    throw ResumableError(.invalidRequest, "pinned public key: no sha256// digest given")
                }
                for pin in pins {
                    // 32 bytes in base64 are 43 characters and one `=`.
                    let digest = pin.dropFirst(8)
                    guard pin.hasPrefix("sha256//"), digest.utf8.count == 44, digest.hasSuffix("="),
                        let decoded = Data(base64Encoded: String(digest)), decoded.count == 32
                    else {
                        throw ResumableError(
                            .invalidRequest,
                            "pinned public key: \(pin.debugDescription) is not sha256// followed by the 44-character "
                                + "base64 of a SHA-256 digest")
                    }
                }
            }
        }
    }
}

// MARK: - Files

/// Checks that the files a TLS configuration names can be read, so a typo fails when the task is created.
enum TLSFiles {
    static func checkReadableFile(_ path: String, setting: String) throws(ResumableError) {
        // One `stat` (symbolic links followed) says whether it exists and what it is: every queued download checks
        // its configuration's files.
        var status = stat()
        guard stat(path, &status) == 0 else {
            throw ResumableError(.invalidRequest, "\(setting) \(path.debugDescription) does not exist")
        }
        guard (status.st_mode & S_IFMT) != S_IFDIR else {
            throw ResumableError(.invalidRequest, "\(setting) \(path.debugDescription) is a directory, not a file")
        }
        // Only a regular file (a symbolic link to one is fine): OpenSSL would block for good opening a FIFO, and
        // read a device such as /dev/zero without end.
        guard (status.st_mode & S_IFMT) == S_IFREG else {
            throw ResumableError(.invalidRequest, "\(setting) \(path.debugDescription) is not a regular file")
        }
        guard access(path, R_OK) == 0 else {
            throw ResumableError(.invalidRequest, "\(setting) \(path.debugDescription) cannot be read")
        }
    }

    static func checkReadableDirectory(_ path: String, setting: String) throws(ResumableError) {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw ResumableError(.invalidRequest, "\(setting) \(path.debugDescription) does not exist")
        }
        guard isDirectory.boolValue else {
            throw ResumableError(.invalidRequest, "\(setting) \(path.debugDescription) is not a directory")
        }
        guard FileManager.default.isReadableFile(atPath: path), FileManager.default.isExecutableFile(atPath: path)
        else {
            throw ResumableError(.invalidRequest, "\(setting) \(path.debugDescription) cannot be read")
        }
        try checkHashedEntries(of: path, setting: setting)
    }

    /// The entries OpenSSL opens in a CA directory during a handshake, those named after a certificate's subject hash
    /// (`1a2b3c4d.0`, `1a2b3c4d.r0` for a CRL), must be regular files where they exist, as ``checkReadableFile(_:setting:)``
    /// requires of a CA file: OpenSSL blocks in `open(2)` for good on a FIFO, past every timeout and a cancel, and
    /// reads a device without end. A dangling link is left to OpenSSL, which skips it.
    private static func checkHashedEntries(of directory: String, setting: String) throws(ResumableError) {
        // Every queued download checks its configuration (a CA directory from `SSL_CERT_DIR` too): a directory whose
        // entries were found fine is not looked through again while it keeps the status it had then (an entry added,
        // removed or replaced changes its modification time).
        var status = stat()
        guard stat(directory, &status) == 0 else { return }
        let stamp = DirectoryStamp(status)
        if checkedDirectories.withLock({ $0[directory] == stamp }) { return }
        guard let stream = opendir(directory) else { return }
        defer { closedir(stream) }
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard isHashedName(name) else { continue }
            let path = (directory as NSString).appendingPathComponent(name)
            var status = stat()
            guard stat(path, &status) == 0 else { continue }
            guard (status.st_mode & S_IFMT) == S_IFREG else {
                throw ResumableError(
                    .invalidRequest,
                    "\(setting) \(directory.debugDescription) holds \(name.debugDescription), which is not a regular file"
                )
            }
        }
        checkedDirectories.withLock { $0[directory] = stamp }
    }

    /// CA directories whose hashed entries were all regular files, with the status they had then.
    private static let checkedDirectories = Mutex<[String: DirectoryStamp]>([:])

    /// What tells a directory's entries changed: its identity and its modification and change times.
    private struct DirectoryStamp: Equatable {
        let device: UInt64
        let inode: UInt64
        let modified: Int
        let modifiedNanoseconds: Int
        let changed: Int
        let changedNanoseconds: Int

        init(_ status: stat) {
            device = UInt64(status.st_dev)
            inode = UInt64(status.st_ino)
            modified = Int(status.st_mtim.tv_sec)
            modifiedNanoseconds = Int(status.st_mtim.tv_nsec)
            changed = Int(status.st_ctim.tv_sec)
            changedNanoseconds = Int(status.st_ctim.tv_nsec)
        }
    }

    /// `^[0-9a-f]{8}\.r?[0-9]+$`: the names OpenSSL looks up in a CA directory.
    private static func isHashedName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard bytes.count >= 10, bytes[8] == UInt8(ascii: ".") else { return false }
        let isHex = { (byte: UInt8) in
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
        }
        guard bytes[0..<8].allSatisfy(isHex) else { return false }
        var rest = bytes[9...]
        if rest.first == UInt8(ascii: "r") { rest = rest.dropFirst() }
        return !rest.isEmpty && rest.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }
}
