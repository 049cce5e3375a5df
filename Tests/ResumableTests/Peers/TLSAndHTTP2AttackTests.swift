import Foundation
import Synchronization
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Attacks on TLS settings against a real nginx speaking HTTP/2 over TLS (ALPN), on the libcurl transport.
///
/// (Multi-connection downloads over HTTP/2 and HTTP/1.1 under nginx's `limit_conn`, `limit_req`, `max_ranges`,
/// `keepalive_requests`, files replaced between pause and resume, nginx or tinyproxy killed under held segments, and
/// resumes across protocols were attacked too and held: no test of them is kept here.)
@Suite(
    "TLS and HTTP/2 attacks against nginx",
    .enabled(
        if: TLSCertificates.testsRun,
        "nginx or openssl is not installed (apt-get install -y nginx-light openssl)"
    )
)
struct TLSAndHTTP2AttackTests {
    // MARK: - Hostile TLS settings

    /// OpenSSL opens the entry named after the issuer's subject hash during the handshake, and blocks in open(2) for
    /// good on a FIFO nobody writes to: past the connect and idle timeouts and the deadline, which a cancel cannot
    /// reach (found against nginx: the download still ran 15 s later). The directory's hashed entries are checked
    /// when the task is made, as a CA file is.
    @Test("A CA directory whose entry for the server's issuer is a FIFO is refused when the task is made, never hangs")
    func capathWithFIFO() async throws {
        let certificates = try await TLSCertificates.shared()
        let nginx = try await NginxPeer(tls: NginxPeer.TLS(certificates.server))
        defer { nginx.stop() }
        try nginx.write(PeerDownloads.bytes(count: 100_000, seed: 794), to: "/data/file.bin")
        // The hashed name OpenSSL looks the test CA up by (openssl rehash made it), as a FIFO nobody writes to.
        let hashed = try #require(
            try FileManager.default.contentsOfDirectory(atPath: certificates.caDirectory.path).first {
                $0.hasSuffix(".0")
            })
        let directory = try TemporaryDirectory()
        let capath = directory.url.appendingPathComponent("capath", isDirectory: true)
        try FileManager.default.createDirectory(at: capath, withIntermediateDirectories: true)
        let fifo = capath.appendingPathComponent(hashed).path
        #expect(mkfifo(fifo, 0o600) == 0)
        let downloads = try TemporaryDirectory()
        var configuration = PeerDownloads.configuration(.libcurl)
        configuration.tls = .init(trust: .pemDirectory(capath))
        // Bounds for a download that would hang on the FIFO; generous, since the download that must succeed below uses
        // them too, on a machine that may be busy (5 s was once too short under two test runs at once).
        configuration.connectTimeout = .seconds(10)
        configuration.idleTimeout = .seconds(10)
        configuration.deadline = .seconds(60)
        do {
            let task = try DownloadTask(
                url: nginx.url("/data/file.bin"), destination: .directory(downloads.url), configuration: configuration)
            task.cancel()
            Issue.record("a CA directory holding a FIFO was accepted")
        } catch {
            #expect(error.code == .invalidRequest && error.message.contains(hashed), "\(error)")
        }
        // The same directory with the test CA's real entry is accepted, and the download verifies against it.
        try FileManager.default.removeItem(atPath: fifo)
        // (`openssl rehash` made a relative symbolic link: its certificate's bytes, not the link.)
        try Data(contentsOf: certificates.caDirectory.appendingPathComponent(hashed)).write(
            to: capath.appendingPathComponent(hashed))
        let result = try await DownloadTask(
            url: nginx.url("/data/file.bin"), destination: .directory(downloads.url), configuration: configuration
        ).value
        try expectSameBytes(Data(contentsOf: result.fileURL), Data(PeerDownloads.bytes(count: 100_000, seed: 794)))
        // A directory found fine is not looked through again while unchanged; a FIFO added since is still refused.
        #expect(mkfifo(capath.appendingPathComponent("ffffffff.0").path, 0o600) == 0)
        #expect(throws: ResumableError.self, "a FIFO added to a directory checked before was accepted") {
            try DownloadTask(
                url: nginx.url("/data/file.bin"), destination: .directory(downloads.url), configuration: configuration
            ).cancel()
        }
    }

    final class Flag: Sendable {
        private let value = Atomic<Bool>(false)
        func set() { value.store(true, ordering: .sequentiallyConsistent) }
        var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }
    }

}
