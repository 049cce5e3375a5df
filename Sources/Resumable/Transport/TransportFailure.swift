import Foundation

/// Why a request failed before HTTP could finish it, in terms both transports share, and the ``ResumableError`` each
/// cause becomes.
///
/// Both transports map what they know into a ``Cause`` (libcurl: its `CURLcode`, error buffer and a few
/// `curl_easy_getinfo` values; URLSession: the `NSError` domain, code and description), and ``error(_:context:)``
/// turns a cause into the error the engine sees. So the same failure gets the same code on both transports, and
/// whether it is retried is decided in one place: ``ResumableError/isTransient``.
///
/// | Cause | Code | Retried |
/// |---|---|---|
/// | connection refused or reset, host not found, send/receive error, empty reply | `network` | yes |
/// | connect timeout, a stall | `timedOut` | yes |
/// | a body cut short | `incompleteBody` | yes |
/// | the proxy could not be resolved or reached | `proxy` | yes |
/// | the proxy answered its `CONNECT` with 408, 429 or 5xx | `proxy` | yes |
/// | the proxy refused (any other status, a SOCKS refusal, a proxy URL curl cannot use) | `proxy` | no |
/// | a certificate or handshake failure | `tls` | no |
/// | a malformed URL or an unsupported scheme | `invalidRequest` | no |
/// | an answer that is not HTTP (HTTP/0.9, a malformed status line, a bad encoding) | `protocolViolation` | no |
///
/// On Linux, FoundationNetworking drives libcurl and keeps only a few of curl's codes: most failures (TLS, proxy,
/// partial bodies) arrive as `NSURLErrorUnknown` with curl's error text as the description. That text is the same
/// curl writes into the libcurl transport's error buffer, so ``curlText(_:context:)`` reads it with the same rules
/// the libcurl transport applies to its own buffer where the code alone does not tell (a receive error that is a TLS
/// alert, a connect failure that names the proxy).
struct TransportFailure: Sendable, Equatable {
    /// What went wrong, as far as a transport can tell.
    enum Cause: Sendable, Equatable {
        /// The connection could not be made or was lost: refused, reset, unreachable, the name did not resolve,
        /// sending or receiving failed, or it closed before an answer.
        case connection
        /// The connection (TCP, TLS, a proxy tunnel) was not established within the connect timeout.
        case connectTimeout
        /// The server stopped sending.
        case stalled
        /// The body ended before its announced end.
        case partialBody
        /// The TLS handshake failed or the TLS layer refused: certificate, host name, pinning, client certificate.
        case tls
        /// The proxy's name did not resolve or it could not be connected to.
        case proxyUnreachable
        /// The proxy refused: it answered `CONNECT` with `status` (when it did), or its handshake or URL failed.
        case proxyRefused(status: Int?)
        /// The URL cannot be requested: malformed, or a scheme other than http(s).
        case invalidURL
        /// The answer is not HTTP the transport can use.
        case notHTTP
        /// The request was cancelled.
        case cancelled
        /// The transport itself failed (an option it set was refused): a defect, not the network's fault.
        case transportFault
    }

    /// What the error message names besides the transport's detail.
    struct Context: Sendable {
        /// The host the request was for (never a URL: no user information can leak into a message).
        var host: String
        /// The connect timeout in force, for the message of ``Cause/connectTimeout``.
        var connectTimeout: Duration
        /// Whether the request's scheme was http or https: then "unsupported protocol" is curl refusing an HTTP/0.9
        /// answer, not the URL.
        var schemeIsHTTP = true
        /// Whether the request went through a proxy (``ProxyRules``): then a connection that could not be made was
        /// the proxy's, as curl connects to nothing else.
        var viaProxy = false
    }

    // MARK: - libcurl

    /// `CURLcode`s, as in curl 7.88's `include/curl/curl.h` (checked with `curl_easy_strerror`).
    enum CurlCode {
        static let unsupportedProtocol: Int32 = 1
        static let failedInit: Int32 = 2
        static let urlMalformat: Int32 = 3
        static let couldntResolveProxy: Int32 = 5
        static let couldntResolveHost: Int32 = 6
        static let couldntConnect: Int32 = 7
        static let weirdServerReply: Int32 = 8
        static let http2: Int32 = 16
        static let partialFile: Int32 = 18
        static let writeError: Int32 = 23
        static let outOfMemory: Int32 = 27
        static let operationTimedOut: Int32 = 28
        static let sslConnectError: Int32 = 35
        static let abortedByCallback: Int32 = 42
        static let badFunctionArgument: Int32 = 43
        static let unknownOption: Int32 = 48
        static let gotNothing: Int32 = 52
        static let sslEngineNotFound: Int32 = 53
        static let sslEngineSetFailed: Int32 = 54
        static let sendError: Int32 = 55
        static let recvError: Int32 = 56
        static let sslCertProblem: Int32 = 58
        static let sslCipher: Int32 = 59
        static let peerFailedVerification: Int32 = 60
        static let badContentEncoding: Int32 = 61
        static let sslEngineInitFailed: Int32 = 66
        static let sslCACertBadFile: Int32 = 77
        static let sslShutdownFailed: Int32 = 80
        static let sslCRLBadFile: Int32 = 82
        static let sslIssuerError: Int32 = 83
        static let sslPinnedPublicKeyNotMatch: Int32 = 90
        static let sslInvalidCertStatus: Int32 = 91
        static let http2Stream: Int32 = 92
        static let proxy: Int32 = 97
        static let sslClientCert: Int32 = 98

        /// The codes that are always a TLS failure.
        static let tls: Set<Int32> = [
            sslConnectError, sslEngineNotFound, sslEngineSetFailed, sslCertProblem, sslCipher,
            peerFailedVerification, sslEngineInitFailed, sslCACertBadFile, sslCRLBadFile, sslIssuerError,
            sslPinnedPublicKeyNotMatch, sslInvalidCertStatus, sslClientCert,
        ]
    }

    /// `CURLproxycode`s (`CURLINFO_PROXY_ERROR`, curl 7.73 and later) after which a SOCKS proxy may well succeed
    /// later: it closed, an exchange with it failed, or it could not reach the server. The others (bad version,
    /// authentication, not allowed, user rejected, …) are refusals.
    static let transientProxyErrors: Set<Int> = [
        3,  // CURLPX_CLOSED
        13, 14, 15, 16,  // CURLPX_RECV_ADDRESS, _AUTH, _CONNECT, _REQACK
        19, 20, 21, 22, 24,  // CURLPX_REPLY_CONNECTION_REFUSED, _GENERAL_SERVER_FAILURE, _HOST_UNREACHABLE,
        // _NETWORK_UNREACHABLE, _TTL_EXPIRED
        27, 28, 29, 30,  // CURLPX_RESOLVE_HOST, CURLPX_SEND_AUTH, _CONNECT, _REQUEST
    ]

    /// The cause of a libcurl transfer that ended with `code`.
    ///
    /// - Parameters:
    ///   - detail: curl's error buffer (or, when empty, its sentence for the code).
    ///   - connectCode: `CURLINFO_HTTP_CONNECTCODE`: the status a proxy answered `CONNECT` with, 0 if none.
    ///   - proxyError: `CURLINFO_PROXY_ERROR`, 0 if none.
    ///   - connected: whether the connection (TCP, TLS and any tunnel) was established (`CURLINFO_PRETRANSFER_TIME_T`
    ///     is not 0): a timeout before that is the connect timeout.
    static func curl(
        _ code: Int32,
        detail: String,
        connectCode: Int = 0,
        proxyError: Int = 0,
        connected: Bool = true,
        context: Context
    ) -> Cause {
        if connectCode != 0, !(200...299).contains(connectCode) { return .proxyRefused(status: connectCode) }
        switch code {
        case CurlCode.operationTimedOut:
            return connected ? .stalled : .connectTimeout
        case CurlCode.abortedByCallback:
            return .cancelled
        case CurlCode.urlMalformat:
            return .invalidURL
        case CurlCode.unsupportedProtocol:
            // For an http(s) URL this is curl refusing an HTTP/0.9 answer.
            return context.schemeIsHTTP ? .notHTTP : .invalidURL
        case CurlCode.weirdServerReply, CurlCode.badContentEncoding:
            return .notHTTP
        case CurlCode.partialFile:
            return .partialBody
        case CurlCode.couldntResolveProxy:
            // "Unsupported proxy syntax in '…'": the proxy URL itself is wrong, not the network.
            return detail.contains("Unsupported proxy") ? .proxyRefused(status: nil) : .proxyUnreachable
        case CurlCode.proxy:
            return transientProxyErrors.contains(proxyError) ? .proxyUnreachable : .proxyRefused(status: nil)
        case CurlCode.couldntConnect:
            // "Unsupported proxy scheme for '…'" is a proxy URL curl cannot use; "Failed to connect to <host>" names
            // the proxy when one was in the way.
            if detail.contains("Unsupported proxy") { return .proxyRefused(status: nil) }
            return context.viaProxy || namesOtherHost(detail, context.host) ? .proxyUnreachable : .connection
        case CurlCode.sendError, CurlCode.recvError:
            return isTLSRefusal(detail) ? .tls : .connection
        case CurlCode.sslConnectError where isSocketFailureDuringHandshake(detail):
            // "Recv failure: Connection reset by peer" while the handshake ran: the socket failed (a restarting
            // server, a load balancer shedding connections), not the TLS negotiation. Transient, as without TLS.
            return .connection
        case CurlCode.badFunctionArgument, CurlCode.unknownOption, CurlCode.failedInit:
            return .transportFault
        default:
            // COULDNT_RESOLVE_HOST, GOT_NOTHING, HTTP2, HTTP2_STREAM, SSL_SHUTDOWN_FAILED, OUT_OF_MEMORY, codes
            // newer than this table: the connection failed, which may not happen again.
            return CurlCode.tls.contains(code) ? .tls : .connection
        }
    }

    /// Whether a send or receive error is the TLS layer refusing rather than the socket failing: an OpenSSL error
    /// ("error:0A00045C:SSL routines::tlsv13 alert certificate required", which TLS 1.3 reports only on the first
    /// read after the handshake) as opposed to `SSL_ERROR_SYSCALL, errno 104`.
    static func isTLSRefusal(_ detail: String) -> Bool {
        detail.contains("SSL routines") || detail.contains("alert certificate") || detail.contains("alert bad")
            || detail.contains("alert handshake failure") || detail.contains("alert unknown ca")
    }

    /// Whether a failed handshake (curl 35) is the socket failing rather than TLS refusing: a reset, a send or
    /// receive failure or an unexpected end, without an OpenSSL reason or alert.
    static func isSocketFailureDuringHandshake(_ detail: String) -> Bool {
        guard !isTLSRefusal(detail) else { return false }
        return [
            "Recv failure", "Send failure", "Connection reset", "SSL_ERROR_SYSCALL", "unexpected eof", "Broken pipe",
        ]
        .contains { detail.contains($0) }
    }

    /// Whether curl's "Failed to connect to <host> port …" names a host other than the request's: then the
    /// connection that failed was the proxy's.
    static func namesOtherHost(_ detail: String, _ host: String) -> Bool {
        let prefix = "Failed to connect to "
        guard let start = detail.range(of: prefix)?.upperBound,
            let end = detail[start...].range(of: " port ")?.lowerBound
        else { return false }
        let named = detail[start..<end].lowercased()
        var host = host.lowercased()
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return !named.isEmpty && named != host
    }

    // MARK: - URLSession

    /// NSURLError codes (`NSURLError.h`), spelled out so the table does not depend on which ones a platform's
    /// `URLError.Code` declares.
    enum URLErrorCode {
        static let unknown = -1
        static let cancelled = -999
        static let badURL = -1000
        static let timedOut = -1001
        static let unsupportedURL = -1002
        static let cannotFindHost = -1003
        static let cannotConnectToHost = -1004
        static let networkConnectionLost = -1005
        static let dnsLookupFailed = -1006
        static let httpTooManyRedirects = -1007
        static let resourceUnavailable = -1008
        static let notConnectedToInternet = -1009
        static let badServerResponse = -1011
        static let zeroByteResource = -1014
        static let cannotDecodeRawData = -1015
        static let cannotDecodeContentData = -1016
        static let cannotParseResponse = -1017
        static let secureConnectionFailed = -1200
        static let serverCertificateHasBadDate = -1201
        static let serverCertificateUntrusted = -1202
        static let serverCertificateHasUnknownRoot = -1203
        static let serverCertificateNotYetValid = -1204
        static let clientCertificateRejected = -1205
        static let clientCertificateRequired = -1206
        static let cannotLoadFromNetwork = -2000
    }

    /// CFNetwork's proxy errors (`CFNetworkErrors.h`), in `kCFErrorDomainCFNetwork`, which Apple's URLSession reports
    /// for a proxy that fails.
    enum CFNetworkCode {
        static let httpProxyConnectionFailure = 306
        static let httpBadProxyCredentials = 307
        static let pacFileError = 308
        static let pacFileAuth = 309
        static let httpsProxyConnectionFailure = 310
        static let httpsProxyFailureUnexpectedResponseToCONNECT = 311
    }

    /// The cause of a URLSession task that completed with an error of `domain` and `code` whose description is
    /// `description` (on Linux, curl's error text).
    static func urlSession(domain: String, code: Int, description: String, context: Context) -> Cause {
        if domain == "kCFErrorDomainCFNetwork" {
            switch code {
            case CFNetworkCode.httpProxyConnectionFailure, CFNetworkCode.httpsProxyConnectionFailure:
                return .proxyUnreachable
            case CFNetworkCode.httpBadProxyCredentials, CFNetworkCode.pacFileError, CFNetworkCode.pacFileAuth,
                CFNetworkCode.httpsProxyFailureUnexpectedResponseToCONNECT:
                return .proxyRefused(status: nil)
            default:
                return .connection
            }
        }
        switch code {
        case URLErrorCode.timedOut:
            return .stalled
        case URLErrorCode.cancelled:
            return .cancelled
        case URLErrorCode.badURL:
            return .invalidURL
        case URLErrorCode.unsupportedURL:
            // FoundationNetworking reports curl's UNSUPPORTED_PROTOCOL so: for an http(s) URL, an HTTP/0.9 answer.
            return context.schemeIsHTTP ? .notHTTP : .invalidURL
        case URLErrorCode.cannotParseResponse, URLErrorCode.cannotDecodeRawData, URLErrorCode.cannotDecodeContentData:
            return .notHTTP
        case URLErrorCode.badServerResponse:
            #if canImport(FoundationNetworking)
                // FoundationNetworking's name for curl's GOT_NOTHING: the connection closed without an answer.
                return .connection
            #else
                return .notHTTP
            #endif
        case URLErrorCode.secureConnectionFailed, URLErrorCode.serverCertificateHasBadDate,
            URLErrorCode.serverCertificateUntrusted, URLErrorCode.serverCertificateHasUnknownRoot,
            URLErrorCode.serverCertificateNotYetValid, URLErrorCode.clientCertificateRejected,
            URLErrorCode.clientCertificateRequired:
            return .tls
        case URLErrorCode.unknown:
            return curlText(description, context: context)
        case URLErrorCode.cannotConnectToHost:
            // FoundationNetworking's name for any connection curl saw refused, the proxy's included.
            return context.viaProxy ? .proxyUnreachable : .connection
        default:
            // cannotFindHost, cannotConnectToHost, networkConnectionLost, dnsLookupFailed, notConnectedToInternet,
            // resourceUnavailable, zeroByteResource, cannotLoadFromNetwork, and codes newer than this table.
            return .connection
        }
    }

    /// The cause behind curl's error text when the code was lost (FoundationNetworking's `NSURLErrorUnknown`): the
    /// messages curl 7.88 writes for the failures the libcurl transport tells apart by code.
    static func curlText(_ text: String, context: Context) -> Cause {
        if let status = connectTunnelStatus(text) { return .proxyRefused(status: status) }
        if text.contains("Unsupported proxy") { return .proxyRefused(status: nil) }
        if text.contains("resolve proxy") { return .proxyUnreachable }
        if text.hasPrefix("Failed to connect to ") {
            return context.viaProxy || namesOtherHost(text, context.host) ? .proxyUnreachable : .connection
        }
        // SSL_CONNECT_ERROR ("OpenSSL SSL_connect: …"), PEER_FAILED_VERIFICATION ("SSL certificate problem: …",
        // "SSL: no alternative certificate subject name matches …"), the other SSL_* codes, and TLS alerts.
        if text.contains("SSL") || text.contains("certificate") || text.contains("pinned public key")
            || isTLSRefusal(text)
        {
            // …but not a socket that failed under TLS: "OpenSSL SSL_read: SSL_ERROR_SYSCALL, errno 104".
            if text.contains("SSL_read") || text.contains("SSL_write"), !isTLSRefusal(text) { return .connection }
            // …nor one that failed during the handshake (a reset, an unexpected end): as curl's code 35 is read.
            if text.contains("SSL_connect"), isSocketFailureDuringHandshake(text) { return .connection }
            return .tls
        }
        if text.contains("bytes remaining to read") || text.contains("outstanding read data remaining")
            || text.contains("partial file")
        {
            return .partialBody
        }
        if text.contains("HTTP/0.9") || text.contains("Weird server reply") || text.contains("Header without colon")
            || text.contains("Nul byte in header") || text.contains("Invalid Content-Length")
            || text.contains("Unsupported HTTP") || text.contains("content unencoding")
            || text.contains("bad HTTP Content or Transfer-Encoding")
        {
            return .notHTTP
        }
        return .connection
    }

    /// The status in curl's "CONNECT tunnel failed, response 403".
    static func connectTunnelStatus(_ text: String) -> Int? {
        guard let range = text.range(of: "CONNECT tunnel failed, response ") else { return nil }
        let digits = text[range.upperBound...].prefix { $0.isNumber }
        return Int(digits)
    }

    // MARK: - The error

    /// `text` with the user information of every URL in it (`scheme://user:password@`) replaced by `***`: a
    /// transport's own sentence may quote a URL as it was given (curl quotes a proxy variable it cannot use, with its
    /// password), and messages reach tokens' neighbours: the terminal, `--json` events, logs.
    static func redactingUserInformation(_ text: String) -> String {
        var bytes = Array(text.utf8)
        var searchFrom = 0
        while let marker = Self.find(Array("://".utf8), in: bytes, from: searchFrom) {
            let start = marker + 3
            var end = start
            // The authority ends at `/`, `?`, `#`, whitespace, a quote or the end; user information before its last `@`.
            var at: Int?
            while end < bytes.count {
                let byte = bytes[end]
                if byte == UInt8(ascii: "/") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#") || byte <= 0x20
                    || byte == UInt8(ascii: "'") || byte == UInt8(ascii: "\"")
                {
                    break
                }
                if byte == UInt8(ascii: "@") { at = end }
                end += 1
            }
            if let at {
                bytes.replaceSubrange(start..<at, with: Array("***".utf8))
                searchFrom = start + 4
            } else {
                searchFrom = start
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func find(_ needle: [UInt8], in bytes: [UInt8], from start: Int) -> Int? {
        guard needle.count <= bytes.count, start <= bytes.count - needle.count else { return nil }
        for index in start...(bytes.count - needle.count)
        where bytes[index..<(index + needle.count)].elementsEqual(needle) {
            return index
        }
        return nil
    }

    /// The error `cause` becomes. `detail` is the transport's own sentence (curl's error buffer, URLSession's
    /// description), kept at the end of the message for the specifics (a port, an OpenSSL reason).
    static func error(
        _ cause: Cause,
        detail: String,
        context: Context,
        underlying: (any Error & Sendable)?
    ) -> ResumableError {
        let host = context.host
        let detail = redactingUserInformation(detail)
        let because = detail.isEmpty ? "" : ": \(detail)"
        switch cause {
        case .connection:
            return ResumableError(.network, "the connection to \(host) failed\(because)", underlying: underlying)
        case .connectTimeout:
            return ResumableError(
                .timedOut, "could not connect to \(host) within \(context.connectTimeout)\(because)",
                underlying: underlying)
        case .stalled:
            return ResumableError(.timedOut, "\(host) stopped sending\(because)", underlying: underlying)
        case .partialBody:
            return ResumableError(
                .incompleteBody, "the body from \(host) ended early\(because)", underlying: underlying)
        case .tls:
            return ResumableError(.tls, "the TLS handshake with \(host) failed\(because)", underlying: underlying)
        case .proxyUnreachable:
            return ResumableError(
                .proxy, "the proxy for \(host) could not be reached\(because)", underlying: underlying,
                proxyTransient: true)
        case .proxyRefused(let status):
            return ResumableError(
                .proxy, "the proxy refused the request for \(host)\(because)", underlying: underlying,
                httpStatus: status, proxyTransient: false)
        case .invalidURL:
            return ResumableError(
                .invalidRequest, "the URL for \(host) cannot be requested\(because)", underlying: underlying)
        case .notHTTP:
            return ResumableError(
                .protocolViolation, "the answer from \(host) is not valid HTTP\(because)", underlying: underlying)
        case .cancelled:
            return ResumableError(.cancelled, "the request was cancelled", underlying: underlying)
        case .transportFault:
            return ResumableError(.invalidRequest, "the transport failed\(because)", underlying: underlying)
        }
    }
}

extension TransportFailure.Context {
    /// The context of `request`: its host (without user information), its connect timeout, its scheme, and whether
    /// ``ProxyRules`` send it through a proxy (on Linux, URLSession's libcurl follows the same route, or the request
    /// is refused before it starts: see `URLSessionTransport.checkProxy(for:rules:)`).
    init(_ request: TransportRequest) {
        self.init(
            host: request.url.host ?? "the server",
            connectTimeout: request.connectTimeout,
            schemeIsHTTP: ["http", "https"].contains(request.url.scheme?.lowercased() ?? ""),
            viaProxy: (try? ProxyRules().route(for: request.url, proxy: request.proxy))?.proxy != nil)
    }
}

/// Runs an action once when a timeout passes, unless cancelled first: the URLSession transport's connect timeout.
///
/// URLSession reports no connect phase (FoundationNetworking never sets curl's `CONNECTTIMEOUT`, and leaves curl's
/// default of 300 s), so there the connect timeout bounds what it can see: the time from starting the request to the
/// response head, which covers resolving, connecting, TLS, a proxy tunnel, sending the request and the server's
/// wait before it answers. libcurl bounds only the connection itself (`CURLOPT_CONNECTTIMEOUT_MS`).
final class ConnectWatchdog: @unchecked Sendable {
    // @unchecked: a dispatch source may be scheduled, resumed and cancelled from any thread.
    private let timer: DispatchSourceTimer

    init(timeout: Duration, action: @escaping @Sendable () -> Void) {
        timer = DispatchSource.makeTimerSource(queue: .global())
        timer.schedule(deadline: .now() + URLSessionTransport.timeoutInterval(timeout))
        timer.setEventHandler(handler: action)
        timer.resume()
    }

    deinit {
        timer.cancel()
    }

    /// Stops the timer; the action will not run if it has not started.
    func cancel() {
        timer.cancel()
    }
}
