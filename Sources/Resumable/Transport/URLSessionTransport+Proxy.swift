import Foundation

extension URLSessionTransport {
    /// Checks, before a request is sent, that the URLSession transport will route it as ``ProxyRules`` decide, and
    /// refuses it with ``ResumableError/Code/proxy`` where it cannot.
    ///
    /// On Linux, swift-corelibs-foundation ignores `URLSessionConfiguration.connectionProxyDictionary` (its
    /// `EasyHandle` never sets a proxy option), and the libcurl it drives reads `http_proxy`, `HTTPS_PROXY`,
    /// `ALL_PROXY` and `NO_PROXY` itself, by libcurl's own rules. So a request may go out only when what that libcurl
    /// will do (``ProxyRules/Dialect/libcurl788`` over ``DownloadTask/Proxy/environment``) is what the configuration
    /// asks for:
    /// - ``DownloadTask/Proxy/environment`` works, except for the two corner cases where libcurl 7.88 decides
    ///   otherwise (an IPv6 host matched by a CIDR range or another spelling of the address, a CIDR length with junk
    ///   after its digits);
    /// - ``DownloadTask/Proxy/none``, an explicit proxy and a bypass list work only for requests where they agree with
    ///   the environment (typically: no proxy variable is set and the configuration says ``DownloadTask/Proxy/none``).
    ///
    /// - an `https` URL never goes through a proxy: swift-corelibs-foundation hands every header block libcurl passes
    ///   to the delegate as a response, the proxy's answer to `CONNECT` included (`HTTP/1.1 200 Connection
    ///   established`, or a refusal such as `403`), so the tunnel's answer would be taken for the server's.
    ///
    /// Every other request fails at once, before anything is sent, naming the libcurl transport, which has none of
    /// these limits. On Apple platforms the system's proxy settings apply instead and the configuration's proxy is
    /// refused unless it is ``DownloadTask/Proxy/environment`` or ``DownloadTask/Proxy/none`` (untested there).
    static func checkProxy(
        for request: TransportRequest, rules: ProxyRules = ProxyRules()
    ) throws(ResumableError) {
        #if canImport(FoundationNetworking)
            let wanted = try rules.route(for: request.url, proxy: request.proxy)
            let actual: ProxyRoute
            do {
                actual = try rules.route(for: request.url, proxy: .environment, dialect: .libcurl788)
            } catch {
                throw ResumableError(
                    .proxy,
                    "the URLSession transport cannot go \(wanted) on Linux: its libcurl would use the environment's "
                        + "proxy, and \(error.message); use the libcurl transport")
            }
            guard wanted == actual else {
                throw ResumableError(
                    .proxy,
                    "the URLSession transport cannot go \(wanted) on Linux: its libcurl reads the environment "
                        + "itself and would go \(actual); use the libcurl transport")
            }
            if let proxy = wanted.proxy, request.url.scheme?.lowercased() == "https" {
                throw ResumableError(
                    .proxy,
                    "the URLSession transport cannot tunnel https through the proxy \(proxy) on Linux: Foundation "
                        + "reports the proxy's answer to CONNECT as the server's response; use the libcurl transport")
            }
        #else
            switch request.proxy.kind {
            case .environment, .none:
                return
            case .server:
                throw ResumableError(
                    .proxy, "the URLSession transport does not support an explicit proxy; use the libcurl transport")
            }
        #endif
    }
}
