import Foundation

extension DownloadTask {
    /// How TLS (https) connections are verified and authenticated.
    ///
    /// Skeleton: the TLS work fills in trust roots, client certificates and pinning.
    public struct TLS: Hashable, Sendable {
        /// Creates the default TLS configuration.
        public init() {}

        /// The system's trust store (or the one the environment names, as curl reads it), no client certificate, no
        /// pinning.
        public static let `default` = TLS()

        /// Checks this configuration when a task is created, so a bad one fails at once with a typed error instead
        /// of after the first request. Skeleton: checks nothing yet.
        func validate() throws(ResumableError) {}
    }
}
