/// How many answers in a row a download may take without bringing its file further: a pure value that the engine
/// asks after each answer the state machine did not finish or fail.
///
/// Progress is measured by the engine against the bytes kept *before* the request was planned, so bytes that the
/// planning dropped (nothing could prove a join safe) and the attempt fetched again are no progress.
/// - A failed attempt (``retrying(progressed:)``) is retried while fewer than
///   ``DownloadTask/Configuration/Retry/maximumRetries`` failed in a row; one that brought bytes starts the count
///   again at one.
/// - A body that ended short of what was asked (a `206` that covers less) is asked again
///   (``askingAgain(progressed:bodyEnded:)``) while the file grows; ``maximumFruitlessBodies`` in a row that leave it
///   where it was (the same short `206` again and again) end the download. Answers dropped at their head (a
///   redirect, the fall-back to the original URL, a `200` read as a CDN's quirk) have limits of their own and do not
///   count.
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

    let maximumRetries: Int
    private var failuresInARow = 0
    private var fruitlessBodiesInARow = 0

    init(maximumRetries: Int) {
        self.maximumRetries = maximumRetries
    }

    /// An attempt failed with a transient error.
    mutating func retrying(progressed: Bool) -> Decision {
        failuresInARow = progressed ? 1 : failuresInARow + 1
        return failuresInARow <= maximumRetries ? .retry(attempt: failuresInARow) : .stop
    }

    /// The answer asks for another request at once; `bodyEnded`: it was a body read to its end.
    mutating func askingAgain(progressed: Bool, bodyEnded: Bool) -> Decision {
        if bodyEnded { fruitlessBodiesInARow = progressed ? 0 : fruitlessBodiesInARow + 1 }
        return fruitlessBodiesInARow <= Self.maximumFruitlessBodies ? .askAgain : .stop
    }

    /// Why ``askingAgain(progressed:bodyEnded:)`` said stop.
    var fruitlessError: ResumableError {
        ResumableError(
            .protocolViolation,
            "the server answered \(fruitlessBodiesInARow) requests in a row without bringing the file further")
    }
}
