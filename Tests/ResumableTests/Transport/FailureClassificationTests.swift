import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// How a failure below HTTP becomes a ``ResumableError`` on each transport (``TransportFailure``), whether it is
/// retried (``ResumableError/isTransient``), the connect timeout, and what people read (`LocalizedError`).
@Suite("Failure classification")
struct FailureClassificationTests {
    /// One row of a classification table.
    struct Row: Sendable, CustomTestStringConvertible {
        var cause: TransportFailure.Cause
        var code: ResumableError.Code
        var transient: Bool
        var httpStatus: Int? = nil
        var label: String

        var testDescription: String { label }
    }

    static let context = TransportFailure.Context(host: "example.com", connectTimeout: .seconds(30))

    static func check(_ row: Row, sourceLocation: SourceLocation = #_sourceLocation) {
        let error = TransportFailure.error(row.cause, detail: "detail", context: context, underlying: nil)
        #expect(error.code == row.code, "\(row.label): \(error)", sourceLocation: sourceLocation)
        #expect(error.isTransient == row.transient, "\(row.label): \(error)", sourceLocation: sourceLocation)
        #expect(error.httpStatus == row.httpStatus, "\(row.label): \(error)", sourceLocation: sourceLocation)
    }

    // MARK: - libcurl

    static func curl(
        _ code: Int32, _ detail: String = "", connectCode: Int = 0, proxyError: Int = 0, connected: Bool = true,
        schemeIsHTTP: Bool = true, host: String = "example.com", viaProxy: Bool = false
    ) -> TransportFailure.Cause {
        var context = context
        context.host = host
        context.schemeIsHTTP = schemeIsHTTP
        context.viaProxy = viaProxy
        return TransportFailure.curl(
            code, detail: detail, connectCode: connectCode, proxyError: proxyError, connected: connected,
            context: context)
    }

    static let curlRows: [Row] = {
        typealias C = TransportFailure.CurlCode
        var rows: [Row] = [
            Row(
                cause: curl(C.couldntConnect, "Failed to connect to example.com port 80 after 0 ms: Couldn't connect"),
                code: .network, transient: true, label: "7 refused"),
            Row(
                cause: curl(C.couldntConnect, "Failed to connect to ::1 port 80 after 0 ms: refused", host: "[::1]"),
                code: .network, transient: true, label: "7 refused, IPv6"),
            Row(
                cause: curl(C.couldntConnect, "Failed to connect to proxy.test port 3128 after 1 ms: Couldn't connect"),
                code: .proxy, transient: true, label: "7 proxy refused the connection"),
            Row(
                cause: curl(C.couldntConnect, "Failed to connect to 127.0.0.1 port 3128 after 0 ms", viaProxy: true),
                code: .proxy, transient: true, label: "7 through a proxy on the same host as the server"),
            Row(
                cause: curl(C.couldntConnect, "Unsupported proxy scheme for 'gopher://p'"), code: .proxy,
                transient: false, label: "7 unusable proxy scheme"),
            Row(cause: curl(C.couldntResolveHost), code: .network, transient: true, label: "6 DNS"),
            Row(cause: curl(C.gotNothing), code: .network, transient: true, label: "52 empty reply"),
            Row(cause: curl(C.sendError, "Connection reset by peer"), code: .network, transient: true, label: "55"),
            Row(cause: curl(C.recvError, "Connection reset by peer"), code: .network, transient: true, label: "56"),
            Row(
                cause: curl(C.recvError, "OpenSSL SSL_read: SSL_ERROR_SYSCALL, errno 104"), code: .network,
                transient: true, label: "56 reset under TLS"),
            Row(
                cause: curl(
                    C.recvError,
                    "OpenSSL SSL_read: error:0A00045C:SSL routines::tlsv13 alert certificate required, errno 0"),
                code: .tls, transient: false, label: "56 TLS 1.3 client certificate alert"),
            Row(cause: curl(C.http2), code: .network, transient: true, label: "16 HTTP/2 framing"),
            Row(cause: curl(C.http2Stream), code: .network, transient: true, label: "92 HTTP/2 stream"),
            Row(
                cause: curl(C.operationTimedOut, connected: false), code: .timedOut, transient: true,
                label: "28 connect timeout"),
            Row(cause: curl(C.operationTimedOut), code: .timedOut, transient: true, label: "28 stall"),
            Row(cause: curl(C.partialFile), code: .incompleteBody, transient: true, label: "18 partial body"),
            Row(
                cause: curl(C.couldntResolveProxy, "Could not resolve proxy: proxy.invalid"), code: .proxy,
                transient: true, label: "5 proxy name"),
            Row(
                cause: curl(C.couldntResolveProxy, "Unsupported proxy syntax in 'http://['"), code: .proxy,
                transient: false, label: "5 proxy syntax"),
            Row(cause: curl(C.proxy, proxyError: 23), code: .proxy, transient: false, label: "97 SOCKS not allowed"),
            Row(cause: curl(C.proxy, proxyError: 33), code: .proxy, transient: false, label: "97 SOCKS user rejected"),
            Row(cause: curl(C.proxy, proxyError: 19), code: .proxy, transient: true, label: "97 SOCKS: server refused"),
            Row(cause: curl(C.proxy, proxyError: 3), code: .proxy, transient: true, label: "97 SOCKS closed"),
            Row(
                cause: curl(C.recvError, "CONNECT tunnel failed, response 403", connectCode: 403), code: .proxy,
                transient: false, httpStatus: 403, label: "CONNECT 403"),
            Row(
                cause: curl(C.recvError, connectCode: 407), code: .proxy, transient: false, httpStatus: 407,
                label: "CONNECT 407"),
            Row(
                cause: curl(C.recvError, connectCode: 502), code: .proxy, transient: true, httpStatus: 502,
                label: "CONNECT 502"),
            Row(
                cause: curl(C.recvError, connectCode: 429), code: .proxy, transient: true, httpStatus: 429,
                label: "CONNECT 429"),
            Row(
                cause: curl(C.couldntConnect, connectCode: 200), code: .network, transient: true,
                label: "a tunnel that opened does not make a later failure the proxy's"),
            Row(cause: curl(C.urlMalformat), code: .invalidRequest, transient: false, label: "3 malformed URL"),
            Row(
                cause: curl(C.unsupportedProtocol, schemeIsHTTP: false), code: .invalidRequest, transient: false,
                label: "1 unsupported scheme"),
            Row(
                cause: curl(C.unsupportedProtocol, "Received HTTP/0.9 when not allowed"), code: .protocolViolation,
                transient: false, label: "1 HTTP/0.9 answer"),
            Row(cause: curl(C.weirdServerReply), code: .protocolViolation, transient: false, label: "8 weird reply"),
            Row(
                cause: curl(C.badContentEncoding), code: .protocolViolation, transient: false,
                label: "61 bad encoding"),
            Row(cause: curl(C.abortedByCallback), code: .cancelled, transient: false, label: "42 aborted"),
            Row(cause: curl(C.badFunctionArgument), code: .invalidRequest, transient: false, label: "43"),
            Row(cause: curl(C.unknownOption), code: .invalidRequest, transient: false, label: "48"),
            Row(cause: curl(9999), code: .network, transient: true, label: "a code newer than the table"),
        ]
        // Every TLS code, with the numbers of curl 7.88's curl.h.
        for code: Int32 in [35, 53, 54, 58, 59, 60, 66, 77, 82, 83, 90, 91, 98] {
            rows.append(Row(cause: curl(code), code: .tls, transient: false, label: "\(code) TLS"))
        }
        return rows
    }()

    @Test("curl codes map to an error code and a retry decision", arguments: curlRows)
    func curlTable(row: Row) {
        Self.check(row)
    }

    @Test("The TLS code table is curl 7.88's: each number is the SSL failure curl names")
    func curlTLSNumbers() throws {
        let library = try CurlLibrary.load().get()
        let sentences: [Int32: String] = [
            35: "SSL connect error",
            53: "SSL crypto engine not found",
            54: "Can not set SSL crypto engine as default",
            58: "Problem with the local SSL certificate",
            59: "Couldn't use specified SSL cipher",
            60: "SSL peer certificate or SSH remote key was not OK",
            66: "Failed to initialise SSL crypto engine",
            77: "Problem with the SSL CA cert (path? access rights?)",
            82: "Failed to load CRL file (path? access rights?, format?)",
            83: "Issuer check against peer certificate failed",
            90: "SSL public key does not match pinned public key",
            91: "SSL server certificate status verification FAILED",
            98: "SSL Client Certificate required",
        ]
        #expect(Set(sentences.keys) == TransportFailure.CurlCode.tls)
        for (code, sentence) in sentences {
            #expect(library.describe(code) == sentence, "\(code)")
        }
        #expect(library.describe(TransportFailure.CurlCode.proxy) == "proxy handshake error")
        #expect(library.describe(TransportFailure.CurlCode.couldntResolveProxy) == "Couldn't resolve proxy name")
        #expect(library.describe(TransportFailure.CurlCode.partialFile) == "Transferred a partial file")
        #expect(library.describe(TransportFailure.CurlCode.gotNothing).hasPrefix("Server returned nothing"))
    }

    // MARK: - URLSession

    static func session(
        _ code: Int, _ description: String = "", domain: String = NSURLErrorDomain, host: String = "example.com",
        viaProxy: Bool = false
    ) -> TransportFailure.Cause {
        var context = context
        context.host = host
        context.viaProxy = viaProxy
        return TransportFailure.urlSession(domain: domain, code: code, description: description, context: context)
    }

    static let sessionRows: [Row] = {
        typealias U = TransportFailure.URLErrorCode
        var rows: [Row] = [
            Row(cause: session(U.cannotConnectToHost), code: .network, transient: true, label: "refused"),
            Row(
                cause: session(U.cannotConnectToHost, viaProxy: true), code: .proxy, transient: true,
                label: "refused through a proxy"),
            Row(cause: session(U.cannotFindHost), code: .network, transient: true, label: "DNS"),
            Row(cause: session(U.dnsLookupFailed), code: .network, transient: true, label: "DNS lookup"),
            Row(cause: session(U.networkConnectionLost), code: .network, transient: true, label: "reset"),
            Row(cause: session(U.notConnectedToInternet), code: .network, transient: true, label: "offline"),
            Row(cause: session(U.timedOut), code: .timedOut, transient: true, label: "timed out"),
            Row(cause: session(U.badURL), code: .invalidRequest, transient: false, label: "bad URL"),
            Row(cause: session(U.unsupportedURL), code: .protocolViolation, transient: false, label: "HTTP/0.9"),
            Row(cause: session(U.cannotParseResponse), code: .protocolViolation, transient: false, label: "parse"),
            Row(cause: session(U.cancelled), code: .cancelled, transient: false, label: "cancelled"),
            Row(
                cause: session(U.unknown, "SSL certificate problem: self-signed certificate"), code: .tls,
                transient: false, label: "Linux: untrusted certificate"),
            Row(
                cause: session(
                    U.unknown, "SSL: no alternative certificate subject name matches target host name 'localhost'"),
                code: .tls, transient: false, label: "Linux: wrong host name"),
            Row(
                cause: session(U.unknown, "OpenSSL SSL_connect: Connection reset by peer in connection to x:443 "),
                code: .network, transient: true, label: "Linux: a reset during the handshake, as curl's code 35"),
            Row(
                cause: session(
                    U.unknown, "OpenSSL SSL_connect: error:0A000410:SSL routines::sslv3 alert handshake failure"),
                code: .tls, transient: false, label: "Linux: a handshake TLS refused, as curl's code 35"),
            Row(
                cause: session(U.unknown, "OpenSSL SSL_read: SSL_ERROR_SYSCALL, errno 104"), code: .network,
                transient: true, label: "Linux: reset under TLS"),
            Row(
                cause: session(U.unknown, "CONNECT tunnel failed, response 403"), code: .proxy, transient: false,
                httpStatus: 403, label: "Linux: CONNECT 403"),
            Row(
                cause: session(U.unknown, "CONNECT tunnel failed, response 503"), code: .proxy, transient: true,
                httpStatus: 503, label: "Linux: CONNECT 503"),
            Row(
                cause: session(U.unknown, "Could not resolve proxy: proxy.invalid"), code: .proxy, transient: true,
                label: "Linux: proxy name"),
            Row(
                cause: session(U.unknown, "Failed to connect to proxy.test port 3128 after 0 ms: Couldn't connect"),
                code: .proxy, transient: true, label: "Linux: proxy unreachable"),
            Row(
                cause: session(
                    U.unknown, "Failed to connect to 10.0.0.1 port 80 after 3 ms: No route", host: "10.0.0.1"),
                code: .network, transient: true, label: "Linux: no route"),
            Row(
                cause: session(U.unknown, "transfer closed with 9900 bytes remaining to read"), code: .incompleteBody,
                transient: true, label: "Linux: partial body"),
            Row(
                cause: session(U.unknown, "Weird server reply"), code: .protocolViolation, transient: false,
                label: "Linux: weird reply"),
            Row(cause: session(U.unknown), code: .network, transient: true, label: "unknown, no text"),
            Row(
                cause: session(310, domain: "kCFErrorDomainCFNetwork"), code: .proxy, transient: true,
                label: "Apple: HTTPS proxy connection failure"),
            Row(
                cause: session(311, domain: "kCFErrorDomainCFNetwork"), code: .proxy, transient: false,
                label: "Apple: unexpected answer to CONNECT"),
            Row(
                cause: session(307, domain: "kCFErrorDomainCFNetwork"), code: .proxy, transient: false,
                label: "Apple: bad proxy credentials"),
        ]
        #if canImport(FoundationNetworking)
            rows.append(
                Row(
                    cause: session(U.badServerResponse), code: .network, transient: true,
                    label: "Linux: bad server response is curl's GOT_NOTHING"))
        #else
            rows.append(
                Row(cause: session(U.badServerResponse), code: .protocolViolation, transient: false, label: "bad"))
        #endif
        for code in [
            U.secureConnectionFailed, U.serverCertificateHasBadDate, U.serverCertificateUntrusted,
            U.serverCertificateHasUnknownRoot, U.serverCertificateNotYetValid, U.clientCertificateRejected,
            U.clientCertificateRequired,
        ] {
            rows.append(Row(cause: session(code), code: .tls, transient: false, label: "NSURLError \(code)"))
        }
        return rows
    }()

    @Test(
        "NSURLError codes (and curl's text behind FoundationNetworking's unknown) map like curl's",
        arguments: sessionRows)
    func sessionTable(row: Row) {
        Self.check(row)
    }

    @Test(
        "Where FoundationNetworking drops curl's code, its text gives the same error code as the code itself",
        arguments: [
            (
                TransportFailure.CurlCode.sslConnectError,
                "OpenSSL SSL_connect: SSL_ERROR_SYSCALL in connection to h:443 "
            ),
            (TransportFailure.CurlCode.peerFailedVerification, "SSL certificate problem: certificate has expired"),
            (TransportFailure.CurlCode.sslCertProblem, "could not load PEM client certificate, OpenSSL error"),
            (TransportFailure.CurlCode.sslCACertBadFile, "error setting certificate file: /nope.pem"),
            (TransportFailure.CurlCode.sslPinnedPublicKeyNotMatch, "SSL: public key does not match pinned public key"),
            (
                TransportFailure.CurlCode.recvError,
                "OpenSSL SSL_read: error:0A000412:SSL routines::sslv3 alert bad certificate, errno 0"
            ),
            (TransportFailure.CurlCode.recvError, "OpenSSL SSL_read: SSL_ERROR_SYSCALL, errno 104"),
            (TransportFailure.CurlCode.partialFile, "transfer closed with 100 bytes remaining to read"),
            (TransportFailure.CurlCode.weirdServerReply, "Header without colon"),
            (TransportFailure.CurlCode.couldntResolveProxy, "Could not resolve proxy: p.invalid"),
            (TransportFailure.CurlCode.couldntConnect, "Failed to connect to p.test port 3128 after 0 ms: refused"),
        ] as [(Int32, String)])
    func curlTextAgreesWithCode(code: Int32, text: String) {
        let byCode = TransportFailure.error(
            Self.curl(code, text), detail: text, context: Self.context, underlying: nil)
        let byText = TransportFailure.error(
            TransportFailure.curlText(text, context: Self.context), detail: text, context: Self.context,
            underlying: nil)
        #expect(byCode.code == byText.code, "\(code) \(text)")
        #expect(byCode.isTransient == byText.isTransient, "\(code) \(text)")
    }

    // MARK: - isTransient

    @Test("HTTP statuses: 408, 429 and 5xx are transient, nothing else is")
    func statusRule() {
        for status in [408, 429, 500, 502, 503, 504, 599] {
            #expect(ResumableError(.httpStatus, "s", httpStatus: status).isTransient, "\(status)")
        }
        for status in [300, 304, 400, 401, 403, 404, 407, 410, 416, 499, 600] {
            #expect(!ResumableError(.httpStatus, "s", httpStatus: status).isTransient, "\(status)")
        }
        #expect(!ResumableError(.httpStatus, "no status").isTransient)
    }

    @Test("Codes outside the network are never transient; a pause is not retried")
    func permanentCodes() {
        for code: ResumableError.Code in [
            .invalidToken, .newerTokenVersion, .tokenGone, .destinationRequired, .invalidRequest, .protocolViolation,
            .redirect, .fileSystem, .diskFull, .destinationExists, .cancelled, .checksumMismatch, .tls, .paused,
        ] {
            #expect(!ResumableError(code, "m").isTransient, "\(code)")
        }
        for code: ResumableError.Code in [.network, .timedOut, .incompleteBody, .tokenInUse] {
            #expect(ResumableError(code, "m").isTransient, "\(code)")
        }
        #expect(!ResumableError(.proxy, "refused").isTransient, "a proxy error is a refusal unless it says otherwise")
    }

    // MARK: - What people read

    @Test("localizedDescription is the message; description adds the code; reason and suggestion where useful")
    func localizedError() {
        let tls = TransportFailure.error(
            .tls, detail: "SSL certificate problem: self-signed certificate", context: Self.context,
            underlying: CurlError(code: 60, description: "SSL peer certificate or SSH remote key was not OK"))
        let asError: any Error = tls
        #expect(
            asError.localizedDescription
                == "the TLS handshake with example.com failed: SSL certificate problem: self-signed certificate")
        #expect(!asError.localizedDescription.contains("could not be completed"))
        #expect(
            String(describing: tls)
                == "tls: the TLS handshake with example.com failed: SSL certificate problem: self-signed certificate "
                + "(SSL peer certificate or SSH remote key was not OK)")
        #expect(tls.failureReason == "The TLS handshake failed.")
        #expect(tls.recoverySuggestion?.contains("--cacert") == true)
        #expect(tls.recoverySuggestion?.contains("Configuration.tls") == true)

        let status = ResumableError(.httpStatus, "the server answered 404 Not Found for http://h/x", httpStatus: 404)
        #expect((status as any Error).localizedDescription == "the server answered 404 Not Found for http://h/x")
        #expect(status.failureReason == "The server answered with status 404.")
        #expect(status.recoverySuggestion == nil)

        let busy = ResumableError(.httpStatus, "the server answered 503", httpStatus: 503)
        #expect(busy.recoverySuggestion == "Try again later.")

        let timeout = TransportFailure.error(.connectTimeout, detail: "", context: Self.context, underlying: nil)
        #expect(timeout.localizedDescription == "could not connect to example.com within 30.0 seconds")
        #expect(timeout.failureReason == "The connection timed out.")

        let refused = TransportFailure.error(
            .proxyRefused(status: 407), detail: "CONNECT tunnel failed, response 407", context: Self.context,
            underlying: nil)
        #expect(refused.failureReason == "The proxy answered with status 407.")
        #expect(refused.recoverySuggestion?.contains("--proxy") == true)
        let unreachable = TransportFailure.error(.proxyUnreachable, detail: "", context: Self.context, underlying: nil)
        #expect(unreachable.failureReason == "The proxy could not be reached.")
        #expect(unreachable.recoverySuggestion == "Try again later.")

        #expect(ResumableError(.paused, "paused").recoverySuggestion == nil, "no token: nothing to resume")
    }

    @Test("A transient failure with a token suggests resuming from it", arguments: TransportKind.all)
    func suggestionWithToken(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 5000)))
        let token = try await fixture.interruptedToken(after: 1000)
        var error = ResumableError(.network, "reset")
        error.resumeToken = token
        #expect(
            error.recoverySuggestion == "Try again later. Resume from the token to keep the bytes already downloaded.")
        var paused = ResumableError(.paused, "paused")
        paused.resumeToken = token
        #expect(paused.recoverySuggestion == "Resume from the token to continue where it stopped.")
    }

    // MARK: - End to end

    /// Downloads `url` and returns the error, the number of `.retrying` events, and how long it took.
    static func fail(
        _ url: URL, transport: TransportKind, retries: Int, in directory: TemporaryDirectory,
        connectTimeout: Duration = .seconds(30)
    ) async throws -> (ResumableError, retries: Int, elapsed: Duration) {
        var configuration = DownloadFixture.configuration(retries: retries, transport: transport)
        configuration.connectTimeout = connectTimeout
        let retrying = Atomic<Int>(0)
        configuration.eventHandler = { event in
            if case .retrying = event { retrying.add(1, ordering: .relaxed) }
        }
        let clock = ContinuousClock()
        let start = clock.now
        let task = try DownloadTask(url: url, destination: .directory(directory.url), configuration: configuration)
        let error = try #require(await failure(of: task))
        return (error, retrying.load(ordering: .relaxed), clock.now - start)
    }

    @Test(
        "A refused connection is retried until the budget is spent, then fails as network", arguments: TransportKind.all
    )
    func refusedIsRetried(transport: TransportKind) async throws {
        let refusing = try RefusingPort()
        let directory = try TemporaryDirectory()
        let url = URL(string: "http://127.0.0.1:\(refusing.port)/file.bin")!
        let (error, retries, _) = try await Self.fail(url, transport: transport, retries: 2, in: directory)
        withExtendedLifetime(refusing) {}
        #expect(error.code == .network, "\(error)")
        #expect(error.isTransient)
        #expect(retries == 2)
        #expect(error.localizedDescription.hasPrefix("the connection to 127.0.0.1 failed"), "\(error)")
        #expect(error.resumeToken == nil, "nothing was on disk")
        #expect(directory.contents().isEmpty)
    }

    @Test("A password in the URL appears in no message", arguments: TransportKind.all)
    func noPasswordInMessages(transport: TransportKind) async throws {
        let refusing = try RefusingPort()
        let directory = try TemporaryDirectory()
        let url = URL(string: "http://someone:hunter2secret@127.0.0.1:\(refusing.port)/file.bin")!
        let (error, _, _) = try await Self.fail(url, transport: transport, retries: 0, in: directory)
        withExtendedLifetime(refusing) {}
        #expect(error.code == .network)
        for text in [
            error.localizedDescription, String(describing: error), error.failureReason ?? "",
            error.recoverySuggestion ?? "",
        ] {
            #expect(!text.contains("hunter2secret"), "\(text)")
        }
    }

    @Test(
        "An answer that is not HTTP is a protocol violation and is not retried",
        arguments: TransportKind.all, ["HELLO THERE", "HTTP/1.1 2x0 Odd"])
    func garbageIsNotRetried(transport: TransportKind, statusLine: String) async throws {
        let fixture = try DownloadFixture(transport: transport)
        // A retry would succeed: only one request may reach the server.
        let url = fixture.serve(.bytes(testBytes(count: 1000)))
        fixture.server.enqueue(ScriptedResponse(statusLine: statusLine), for: "/file.bin")
        let (error, retries, _) = try await Self.fail(url, transport: transport, retries: 3, in: fixture.directory)
        #expect(error.code == .protocolViolation, "\(error)")
        #expect(!error.isTransient)
        #expect(retries == 0)
        #expect(fixture.server.requests(for: "/file.bin").count == 1)
    }

    #if os(Linux)
        @Test(
            "A server that never completes the connection fails with timedOut after the connect timeout, retried",
            arguments: TransportKind.all)
        func connectTimeout(transport: TransportKind) async throws {
            let listener = try FullBacklogListener()
            let directory = try TemporaryDirectory()
            let (error, retries, elapsed) = try await Self.fail(
                listener.url, transport: transport, retries: 1, in: directory, connectTimeout: .milliseconds(300))
            withExtendedLifetime(listener) {}
            #expect(error.code == .timedOut, "\(error)")
            #expect(error.isTransient)
            #expect(retries == 1)
            #expect(
                error.localizedDescription.hasPrefix("could not connect to 127.0.0.1 within 0.3 seconds"),
                "\(error)")
            // Two attempts of 0.3 s; the idle timeout is 600 s and curl's own connect default 300 s: well under either
            // shows the 0.3 s applied. Not a speed goal: a machine with both cores busy with other builds once took 80 s
            // for the whole test (0.6 s alone), so the bound only tells the connect timeout from those two.
            #expect(elapsed >= .milliseconds(600))
            #expect(elapsed < .seconds(250), "took \(elapsed)")
            #expect(directory.contents().isEmpty)
        }

        @Test("The filled backlog really holds a connection attempt: a plain socket cannot connect")
        func fullBacklogHolds() async throws {
            let listener = try FullBacklogListener()
            let connected = try await onOwnThread { listener.probe(timeoutMilliseconds: 200) }
            #expect(!connected)
        }
    #endif

    @Test("The connect timeout leaves a slow first byte alone on libcurl: it bounds only the connection")
    func curlConnectTimeoutIsOnlyTheConnection() async throws {
        let listener = try StalledListener()
        let transport = try CurlTransportTests.transport()
        var request = CurlTransportTests.request(listener.url, idleTimeout: .milliseconds(900))
        request.connectTimeout = .milliseconds(100)
        let error = await Task(executorPreference: DedicatedThreadExecutor.shared) { () async -> ResumableError? in
            do throws(ResumableError) {
                try await transport.execute(request, consumer: RecordingConsumer())
                return nil
            } catch {
                return error
            }
        }.value
        // The kernel completed the connection in the backlog: what ends the request is the idle timeout.
        #expect(error?.code == .timedOut)
        #expect(error?.message.contains("could not connect") == false, "\(String(describing: error))")
    }
}

#if os(Linux)
    /// A loopback listener whose accept queue is full, so a new connection attempt is never completed: Linux drops
    /// the SYN of a connection to a listener whose queue is full (listen backlog 0 holds one connection), and the
    /// client keeps retransmitting it. Deterministic: the queue is filled, and seen full, before the URL is used.
    final class FullBacklogListener: Sendable {
        let port: UInt16
        private let descriptor: Int32
        private let filler: Int32

        init() throws {
            let (descriptor, port) = try StalledListener.boundSocket(listening: false)
            guard Glibc.listen(descriptor, 0) == 0 else {
                close(descriptor)
                throw POSIXError(.EADDRINUSE)
            }
            self.descriptor = descriptor
            self.port = port
            filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard filler >= 0, Self.connect(filler, port: port) else {
                close(descriptor)
                if filler >= 0 { close(filler) }
                throw POSIXError(.ECONNREFUSED)
            }
            // The filler's handshake is complete on the client side; wait until the listener counts it as queued
            // (TCP_INFO's unacked is a listener's accept-queue length), so no later SYN can slip in before it.
            var queued = false
            for _ in 0..<10_000 where !queued {
                queued = Self.queueLength(descriptor) >= 1
                if !queued { usleep(100) }
            }
            guard queued else {
                close(descriptor)
                close(filler)
                throw POSIXError(.ETIMEDOUT)
            }
        }

        deinit {
            close(filler)
            close(descriptor)
        }

        var url: URL { URL(string: "http://127.0.0.1:\(port)/never")! }

        /// Whether a plain non-blocking connect completes within `timeoutMilliseconds`.
        func probe(timeoutMilliseconds: Int32) -> Bool {
            let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            defer { close(probe) }
            _ = Self.connect(probe, port: port)
            var poll = pollfd(fd: probe, events: Int16(POLLOUT), revents: 0)
            return Glibc.poll(&poll, 1, timeoutMilliseconds) == 1
        }

        private static func connect(_ socket: Int32, port: UInt16) -> Bool {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = port.bigEndian
            return withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                    Glibc.connect(socket, generic, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
                }
            }
        }

        private static func queueLength(_ descriptor: Int32) -> UInt32 {
            var info = tcp_info()
            var length = socklen_t(MemoryLayout<tcp_info>.size)
            guard getsockopt(descriptor, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 else { return 0 }
            return info.tcpi_unacked
        }
    }
#endif

@Suite("A transport's own sentence never carries a password")
struct UserInformationRedactionTests {
    @Test(
        "User information of every URL in a message is replaced",
        arguments: [
            (
                "Unsupported proxy syntax in 'http://alice:SECRET@pro!xy:3128'",
                "Unsupported proxy syntax in 'http://***@pro!xy:3128'"
            ),
            ("a http://u:p@a/x and https://v:q@b?y", "a http://***@a/x and https://***@b?y"),
            ("no url here, user@host", "no url here, user@host"),
            ("http://host/path@here", "http://host/path@here"),
            ("socks5://a:b:c@d@e:1", "socks5://***@e:1"),
            ("", ""),
        ])
    func redacts(text: String, expected: String) {
        #expect(TransportFailure.redactingUserInformation(text) == expected)
    }

    @Test("Every message made from a transport's sentence is redacted")
    func errorsAreRedacted() {
        let context = TransportFailure.Context(
            TransportRequest(url: URL(string: "http://example.org/f")!, headers: [], idleTimeout: .seconds(1)))
        let error = TransportFailure.error(
            .proxyUnreachable, detail: "Could not resolve proxy: http://alice:SECRET@proxy", context: context,
            underlying: nil)
        #expect(!error.message.contains("SECRET"), "\(error.message)")
        #expect(!error.message.contains("alice"), "\(error.message)")
    }
}
