import Foundation
import Resumable

/// The proxy options `get` and `resume` share, with curl's meanings: `--proxy URL` and `--noproxy LIST`.
///
/// Without `--proxy`, the environment's `http_proxy`, `https_proxy`/`HTTPS_PROXY`, `all_proxy`/`ALL_PROXY` apply;
/// without `--noproxy`, `no_proxy`/`NO_PROXY` does (for `--proxy` too, as in curl). Neither is written into a token:
/// `resume` takes them again. A password in `--proxy` is never printed, and never written anywhere.
struct ProxyOptions: Sendable {
    /// The arguments, in help order.
    static let arguments: [ArgumentSpec] = [
        .option(
            "proxy", short: "x", value: "[http://][user:password@]host[:port]",
            help: "Send every request through this HTTP proxy (an https URL through a CONNECT tunnel), instead of "
                + "the one http_proxy, https_proxy or all_proxy names. Port 1080 when none is given; '' for no proxy "
                + "at all. The user and password (percent-encoded) are sent to the proxy only, never printed nor "
                + "written into a token. Hosts that --noproxy (or else no_proxy/NO_PROXY) lists still go directly."),
        .option(
            "noproxy", value: "list",
            help: "Hosts that go directly, not through a proxy, replacing no_proxy/NO_PROXY: '*' for all, or names "
                + "separated by commas (a name matches itself and its subdomains), IP addresses and CIDR ranges "
                + "such as 10.0.0.0/8 or fd00::/8. '' bypasses no host."),
    ]

    /// `--proxy`, when given.
    var proxy: DownloadTask.Proxy?
    /// `--noproxy`, when given.
    var noProxy: String?

    /// Reads the options from a parse.
    init(_ parsed: ParsedArguments) throws(UsageError) {
        if let text = parsed.value("proxy") {
            let proxy = DownloadTask.Proxy.commandLine(text)
            if let reason = proxy.invalidReason {
                // The reason never quotes the URL, which may hold a password.
                throw UsageError("option '--proxy' needs an http proxy URL: \(reason)")
            }
            self.proxy = proxy
        }
        noProxy = parsed.value("noproxy")
    }

    /// Sets what these options say on `configuration`.
    func apply(to configuration: inout DownloadTask.Configuration) {
        var proxy = self.proxy ?? .environment
        if let noProxy {
            proxy = proxy.bypassing(noProxy)
        }
        configuration.proxy = proxy
    }
}
