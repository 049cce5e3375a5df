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

    @Test(
        "A CA directory whose entry for the server's issuer is a FIFO: the download ends within its timeouts, it never hangs"
    )
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
        configuration.connectTimeout = .seconds(2)
        configuration.idleTimeout = .seconds(2)
        configuration.deadline = .seconds(5)
        let task = try DownloadTask(
            url: nginx.url("/data/file.bin"), destination: .directory(downloads.url), configuration: configuration)
        let done = Flag()
        let outcome = Task {
            let result = await task.result
            done.set()
            return result
        }

        // Nobody writes to the FIFO: a reader that opens it blocks in open(2) until a writer comes. The task's
        // timeouts (2 s) and its deadline (5 s) should end it well within 15 s.
        let started = ContinuousClock.now
        while !done.isSet, ContinuousClock.now < started + .seconds(15) {
            try await Task.sleep(for: .milliseconds(20))
        }
        // Whether the TLS library sits in open(2) on the FIFO: a non-blocking writer can open it only then.
        let writer = open(fifo, O_WRONLY | O_NONBLOCK)
        let blockedInOpen = writer >= 0
        if writer >= 0 { close(writer) }
        #expect(
            done.isSet,
            "the download still runs 15 s after it started, past its 2 s timeouts and 5 s deadline (TLS library blocked opening the FIFO: \(blockedInOpen))"
        )
        // Unblock every later open so the test can end: a writer that comes and goes gives each reader EOF.
        while !done.isSet {
            let writer = open(fifo, O_WRONLY | O_NONBLOCK)
            if writer >= 0 { close(writer) }
            try await Task.sleep(for: .milliseconds(5))
        }
        let result = await outcome.value
        if case .failure(let error) = result {
            #expect([.tls, .invalidRequest, .timedOut].contains(error.code), "\(error)")
        }
    }

    final class Flag: Sendable {
        private let value = Atomic<Bool>(false)
        func set() { value.store(true, ordering: .sequentiallyConsistent) }
        var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }
    }

}
