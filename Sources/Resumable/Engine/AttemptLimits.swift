/// How many answers in a row a download may take without bringing its file further: a pure value that the engine
/// asks after each answer the state machine did not finish or fail.
///
/// Progress is measured by the engine against the bytes kept *before* the request was planned, so bytes that the
/// planning dropped (nothing could prove a join safe) and the attempt fetched again are no progress. It must also be
/// worth the name: at least ``progressFloor(expectedLength:)`` new bytes. Otherwise a server that sends one byte
/// and then stalls or closes, again and again (or answers every range request with a one-byte `206`), would reset the
/// counts at every answer and keep the download crawling for as long as the file has bytes, never failing.
/// - A failed attempt (``retrying(gained:expectedLength:)``) is retried while fewer than
///   ``DownloadTask/Configuration/Retry/maximumRetries`` failed in a row; one that brought enough bytes starts the
///   count again at one.
/// - A body that ended short of what was asked (a `206` that covers less) is asked again
///   (``askingAgain(gained:expectedLength:bodyEnded:)``) while the file grows; ``maximumFruitlessBodies`` in a row
///   that leave it where it was, or bring it less than the floor further (the same short `206` again and again), end
///   the download. Answers dropped at their head (a redirect, the fall-back to the original URL, a `200` read as a
///   CDN's quirk) have limits of their own and do not count.
struct AttemptLimits: Sendable {
    /// What the engine does next.
    enum Decision: Equatable, Sendable {
        /// Ask again at once.
        case askAgain
        /// Wait, then try again: the `attempt`-th failure in a row.
        case retry(attempt: Int)
        /// Stop: the limit is reached.
        case stop
    }

    /// Bodies in a row that leave the file where it was before the download ends.
    static let maximumFruitlessBodies = 10

    /// The most an answer must bring to count as progress: 64 KiB, less than any link that works at all delivers
    /// between two failures, and enough that a server trickling bytes one answer at a time gets a bounded number of
    /// answers per 64 KiB before the download gives up.
    static let minimumProgress: Int64 = 64 << 10

    /// The new bytes an answer must bring to count as progress: ``minimumProgress``, or a sixteenth of a smaller
    /// file (so that a flaky link still finishes a small file a few kilobytes at a time), and at least one byte.
    static func progressFloor(expectedLength: Int64?) -> Int64 {
        max(1, min(minimumProgress, (expectedLength ?? .max) / 16))
    }

    let maximumRetries: Int
    private var failuresInARow = 0
    private var fruitlessBodiesInARow = 0

    init(maximumRetries: Int) {
        self.maximumRetries = maximumRetries
    }

    /// An attempt failed with a transient error after bringing `gained` new bytes to a file of `expectedLength`.
    mutating func retrying(gained: Int64, expectedLength: Int64?) -> Decision {
        let progressed = gained >= Self.progressFloor(expectedLength: expectedLength)
        failuresInARow = progressed ? 1 : failuresInARow + 1
        return failuresInARow <= maximumRetries ? .retry(attempt: failuresInARow) : .stop
    }

    /// The answer asks for another request at once, after bringing `gained` new bytes; `bodyEnded`: it was a body read
    /// to its end.
    mutating func askingAgain(gained: Int64, expectedLength: Int64?, bodyEnded: Bool) -> Decision {
        if bodyEnded {
            let progressed = gained >= Self.progressFloor(expectedLength: expectedLength)
            fruitlessBodiesInARow = progressed ? 0 : fruitlessBodiesInARow + 1
        }
        return fruitlessBodiesInARow <= Self.maximumFruitlessBodies ? .askAgain : .stop
    }

    /// Why ``askingAgain(gained:expectedLength:bodyEnded:)`` said stop.
    var fruitlessError: ResumableError {
        ResumableError(
            .protocolViolation,
            "the server answered \(fruitlessBodiesInARow) requests in a row without bringing the file further "
                + "(or by less than \(Self.minimumProgress >> 10) KiB, or a sixteenth of the file, each)")
    }
}
