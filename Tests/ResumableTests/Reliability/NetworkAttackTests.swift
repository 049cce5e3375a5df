import Foundation
import Synchronization
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review of the TLS, proxy and failure-classification work (review 2). Each test is a proven break
/// and failed on the code it was written against (b27c3eb); both are fixed.
@Suite("Network attack findings (review 2)")
struct NetworkAttackTests {
    /// BREAK (rule: outside data is hostile, never a hang): `TLSFiles.checkReadableFile` accepts anything that
    /// exists, is not a directory and is readable, so a FIFO (or a character device) named as the CA file, by
    /// `.pemFile` or by `CURL_CA_BUNDLE`/`SSL_CERT_FILE` in the environment, passes validation. libcurl's OpenSSL
    /// then `fopen`s it while setting up the handshake and blocks forever in `open(2)` waiting for a writer: the
    /// task never ends, and `cancel()` cannot end it either (the blocked thread never returns to curl's progress
    /// callback); observed: the task ends (with `.cancelled`) only once the test feeds the FIFO at 12 s. (A
    /// character device such as `/dev/zero` passes the same check; not tried, it may spin instead.)
    ///
    /// Fix: require a regular file (`S_ISREG` after `stat`) for CA files, client certificates/keys and pin files,
    /// and directories for CA paths, failing with `.invalidRequest` when the task is created.
    ///
    /// With the fix, creating the task refuses the FIFO at once; nothing is connected and nothing waits.
    @Test("A FIFO named as the CA file ends the task with a typed error instead of hanging it")
    func fifoCAFileHangs() throws {
        let directory = try TemporaryDirectory()
        let fifo = directory.url.appendingPathComponent("ca.pem")
        #expect(mkfifo(fifo.path, 0o600) == 0)
        let downloads = try TemporaryDirectory()
        // A character device (endless reads) is refused the same way.
        for file in [fifo, URL(fileURLWithPath: "/dev/zero")] {
            var configuration = PeerDownloads.configuration(.libcurl)
            configuration.tls = DownloadTask.TLS(trust: .pemFile(file))
            configuration.connectTimeout = .seconds(2)
            do {
                _ = try DownloadTask(
                    url: URL(string: "https://127.0.0.1:9/file.bin")!, destination: .directory(downloads.url),
                    configuration: configuration)
                Issue.record("\(file.path) as the CA file was accepted: the handshake would block reading it")
            } catch {
                #expect(error.code == .invalidRequest, "\(error)")
                #expect(error.message.contains("not a regular file"), "\(error)")
            }
        }
        #expect(downloads.contents().isEmpty)
    }

    /// BREAK (rule: transient errors are retried; "find a transient cause classed permanent"): a TCP connection
    /// reset while the TLS handshake is under way (a server restarting, a load balancer shedding, a middlebox
    /// reset) is a network failure, but libcurl reports it as CURLE_SSL_CONNECT_ERROR (35, "Recv failure:
    /// Connection reset by peer") and `TransportFailure.curl` puts every code in `CurlCode.tls` into `.tls`, which
    /// `isTransient` never retries. A download with retries configured that meets one reset on a reconnect ends at
    /// once with `.tls` ("the TLS handshake with … failed") and the CLI exits 1 (permanent) instead of 75; the
    /// recovery text points at certificates. The URLSession case passes (FoundationNetworking's text goes through
    /// `curlText`, which classes it `.connection`): the two transports disagree on the same failure.
    ///
    /// Fix: for CURLE_SSL_CONNECT_ERROR, look at the error text (as `isTLSRefusal` already does for SEND/RECV
    /// errors): "Recv failure"/"Send failure"/`SSL_ERROR_SYSCALL`/"Connection reset"/"unexpected eof" without an
    /// OpenSSL reason or alert is `.connection`.
    @Test(
        "A connection reset during the TLS handshake is retried as a network failure, not ended as .tls",
        arguments: [DownloadTask.Transport.libcurl, .urlSession])
    func resetDuringHandshakeIsTransient(transport: DownloadTask.Transport) async throws {
        let listener = ResettingListener()
        defer { listener.stop() }
        var configuration = PeerDownloads.configuration(transport)
        configuration.retry = .init(
            maximumRetries: 2, initialDelay: .milliseconds(10), maximumDelay: .milliseconds(20))
        let downloads = try TemporaryDirectory()
        let task = try DownloadTask(
            url: URL(string: "https://localhost:\(listener.port)/file.bin")!, destination: .directory(downloads.url),
            configuration: configuration)
        let events = PeerDownloads.events(of: task)
        let result = await task.result
        let retries = await events.value.filter { event in
            if case .retrying = event { return true }
            return false
        }.count
        guard case .failure(let error) = result else {
            Issue.record("a server that resets every connection cannot be downloaded from")
            return
        }
        #expect(error.code != .tls, "classed as a TLS refusal: \(error)")
        #expect(error.isTransient, "\(error)")
        #expect(retries == 2, "a reset connection must use the configured retries (got \(retries))")
    }
}

/// A TCP listener on 127.0.0.1 that reads a little of each connection (the ClientHello) and resets it.
final class ResettingListener: @unchecked Sendable {
    let socketDescriptor: Int32
    let port: Int
    private let thread: Thread

    init() {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) }
        }
        listen(listener, 16)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        socketDescriptor = listener
        port = Int(UInt16(bigEndian: address.sin_port))
        thread = Thread {
            while true {
                let connection = accept(listener, nil, nil)
                if connection < 0 { return }
                var buffer = [UInt8](repeating: 0, count: 16)
                _ = read(connection, &buffer, buffer.count)
                var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
                _ = setsockopt(
                    connection, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
                close(connection)
            }
        }
        thread.start()
    }

    func stop() {
        shutdown(socketDescriptor, Int32(SHUT_RDWR))
        close(socketDescriptor)
    }
}
