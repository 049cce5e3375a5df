extension DownloadTask {
    /// How many connections one download may use at once.
    ///
    /// Several connections help where a server or a CDN caps each connection's rate, or where one TCP stream
    /// cannot fill a long, fat pipe. Each connection fetches a segment with `Range: bytes=a-b` under `If-Range`
    /// with the first answer's strong validator, and its `206` is checked (range, total length, validators)
    /// before a byte of it is written; an answer showing that the file changed restarts the whole download from
    /// byte 0, so segments of two versions are never joined. A download uses one connection whenever the server
    /// gave no strong validator, no length, or no sign of range support.
    public struct Connections: Hashable, Sendable, CustomStringConvertible {
        enum Kind: Hashable, Sendable {
            case fixed(Int)
            case automatic
        }

        let kind: Kind

        private init(kind: Kind) {
            self.kind = kind
        }

        /// The most connections a download uses.
        public static let maximum = 16

        /// One connection, as a plain GET would.
        public static let single = Connections(kind: .fixed(1))

        /// Exactly `count` connections (1 through ``maximum``) while the file is large enough for that many
        /// segments of at least 1 MiB; fewer when the server answers `503`/`429` or refuses connections.
        /// ``DownloadTask/init(url:destination:configuration:)`` throws ``ResumableError/Code/invalidRequest`` for
        /// a count outside that range.
        public static func fixed(_ count: Int) -> Connections {
            Connections(kind: .fixed(count))
        }

        /// The default: one connection while less than 16 MiB is missing; for more, start with one, try four, and
        /// double the count while the total rate improves by at least a fifth, up to ``maximum``, dropping back when
        /// a step did not bring that. Fewer when the server answers `503`/`429` or refuses connections.
        public static let automatic = Connections(kind: .automatic)

        public var description: String {
            switch kind {
            case .fixed(let count): return "\(count)"
            case .automatic: return "auto"
            }
        }

        /// Throws unless the count is within 1 through ``maximum``.
        func validate() throws(ResumableError) {
            if case .fixed(let count) = kind, !(1...Self.maximum).contains(count) {
                throw ResumableError(
                    .invalidRequest, "connections must be between 1 and \(Self.maximum), not \(count)")
            }
        }

        /// Parses the CLI's `--connections` value: a count, or `auto`.
        package init?(argument: String) {
            if argument == "auto" {
                self = .automatic
            } else if let count = Int(argument), (1...Self.maximum).contains(count) {
                self = .fixed(count)
            } else {
                return nil
            }
        }
    }
}
