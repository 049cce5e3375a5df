import Foundation

extension DownloadTask {
    /// Which proxy requests go through.
    ///
    /// Skeleton: the proxy work fills in explicit proxies and the environment's rules.
    public struct Proxy: Hashable, Sendable {
        enum Kind: Hashable, Sendable {
            case environment
            case none
        }

        let kind: Kind

        /// The proxy the environment names, by curl's rules (`http_proxy`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`).
        public static let environment = Proxy(kind: .environment)
        /// Every request goes directly to its server, whatever the environment says.
        public static let none = Proxy(kind: .none)

        /// Checks this configuration when a task is created, so a bad one fails at once with a typed error instead
        /// of after the first request. Skeleton: checks nothing yet.
        func validate() throws(ResumableError) {}
    }
}
