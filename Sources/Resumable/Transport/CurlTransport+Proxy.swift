import CResumable
import Foundation

extension CurlTransport {
    /// Sets the proxy of one request on `easy`: the `route` ``ProxyRules`` decided for the request's own URL, so
    /// curl's own reading of the environment never adds to it: `CURLOPT_PROXY` is the chosen proxy or `""` (none),
    /// `CURLOPT_NOPROXY` is `""` (the decision already applied the bypass list), and the proxy's credentials go in
    /// `CURLOPT_PROXYUSERNAME` and `CURLOPT_PROXYPASSWORD` (curl copies them; they are never logged).
    ///
    /// An `https` URL through a proxy is tunnelled with `CONNECT`, an `http` one is sent to the proxy with its
    /// absolute URL, as curl does.
    ///
    /// - Throws: ``ResumableError/Code/invalidRequest`` when libcurl refuses an option.
    static func applyProxy(
        _ route: ProxyRoute, to easy: UnsafeMutableRawPointer, library: CurlLibrary
    ) throws(ResumableError) {
        let table = library.table
        func set(_ option: Int32, _ name: String, _ value: String) throws(ResumableError) {
            let code = cresumable_curl_easy_setopt_pointer(table, easy, option, value)
            if code != CRESUMABLE_CURLE_OK {
                throw ResumableError(.invalidRequest, "curl option \(name): \(library.describe(code))")
            }
        }
        try set(CRESUMABLE_CURLOPT_NOPROXY, "NOPROXY", "")
        guard let proxy = route.proxy else {
            try set(CRESUMABLE_CURLOPT_PROXY, "PROXY", "")
            return
        }
        try set(CRESUMABLE_CURLOPT_PROXY, "PROXY", proxy.description)
        if let credentials = proxy.credentials {
            try set(CRESUMABLE_CURLOPT_PROXYUSERNAME, "PROXYUSERNAME", credentials.user)
            try set(CRESUMABLE_CURLOPT_PROXYPASSWORD, "PROXYPASSWORD", credentials.password)
        }
    }
}
