/// How many answers in a row a download may take without bringing its file further: a pure value that the engine
/// asks after each answer the state machine did not finish or fail.
///
/// Progress is measured by the engine against the bytes kept *before* the request was planned, so bytes that the
/// planning dropped (nothing could prove a join safe) and the attempt fetched again are no progress. It must also be
/// worth the name (``progressFloor(missing:)``): otherwise a server that sends one byte and then stalls or closes,
/// again and again (or answers every range request with a one-byte `206`), would reset the counts at every answer
/// and keep the download crawling for as long as the file has bytes, never failing.
/// - A failed attempt (``retrying(gained:missing:)``) is retried while fewer than
///   ``DownloadTask/Configuration/Retry/maximumRetries`` failed in a row; once the answers since the count last
///   started brought the floor together, it starts again at one (at 0 after a body that brought all it was asked).
///   A multi-connection phase that ends in a retry counts as one attempt bringing its bytes per answer.
/// - A body that ended short of what was asked (a `206` that covers less) is asked again
///   (``askingAgain(gained:missing:asked:bodyEnded:)``) while the file grows; ``maximumFruitlessBodies`` in a row
///   that leave it where it was, or bring it less than ``minimumBodyProgress`` further without bringing all that was
///   asked (the same short `206` again and again, a byte at a time), end the download. A body that brought all it was
///   asked for is progress however short: the gaps of a version 2 token are asked one by one.
/// - Answers dropped at their head (a redirect, the fall-back to the original URL, a `200` read as a CDN's quirk)
///   have limits of their own per chain, and here one more: at most ``maximumDroppedAnswers`` of them between two
///   answers that brought the failures' floor. A redirect chain's limit starts again at every answer that is not a
///   redirect, so a server redirecting through a chain before every capped `206` would otherwise get ten requests
///   per answer.
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

    /// The most failed attempts must bring together to count as progress: 64 KiB, less than any link that works at
    /// all delivers in a few attempts, and enough that a server trickling bytes one answer at a time gets a bounded
    /// number of answers before the download gives up.
    static let minimumProgress: Int64 = 64 << 10

    /// The most a short body must bring to count as progress: 4 KiB. Lower than for failures: a server may cap its
    /// `206`s (RFC 9110 §15.3.7), and each capped answer is a whole, correct one; only a trickle below this ends.
    static let minimumBodyProgress: Int64 = 4 << 10

    /// The new bytes failed attempts must bring together to count as progress: ``minimumProgress``, or all that was
    /// missing when that is less, and at least one byte. Not a fraction of what is missing: that would loosen the
    /// limits as the end nears, and a server could buy a new round of failures for every step closer to the end.
    /// Since the attempts' bytes add up, a link that cuts every few KiB still brings the last bytes in a few tries.
    static func progressFloor(missing: Int64?) -> Int64 {
        max(1, min(minimumProgress, missing ?? .max))
    }

    /// What a short body (an answer that covered less than its request asked) must bring to count as progress:
    /// ``minimumBodyProgress``, or ``progressFloor(missing:)`` or what was asked when less, and at least one byte.
    /// The one rule for a short answer on one connection and for a segment's short answer in a multi-connection phase
    /// (``SegmentSchedule``).
    static func bodyFloor(missing: Int64?, asked: Int64?) -> Int64 {
        max(1, min(minimumBodyProgress, progressFloor(missing: missing), asked ?? .max))
    }

    let maximumRetries: Int
    /// Answers dropped at their head, or phases that asked again, allowed in a row without the failures' floor between
    /// them: a whole redirect chain (``DownloadTask/Configuration/maximumRedirects``), the fall-back to the original
    /// URL and a `200` read as a CDN's quirk.
    let maximumDroppedAnswers: Int
    private var failuresInARow = 0
    private var droppedAnswersInARow = 0
    private var fruitlessBodiesInARow = 0
    /// What the failures since the count last started again brought, together: a link that cuts every connection
    /// after 48 KiB brings the floor every second attempt, and finishes; a trickle of bytes never adds up.
    private var gainedSinceProgress: Int64 = 0
    /// What the short bodies since the fruitless count last started brought, together.
    private var bodyGainedSinceProgress: Int64 = 0

    init(maximumRetries: Int, maximumRedirects: Int = 10) {
        self.maximumRetries = maximumRetries
        let (dropped, overflow) = max(maximumRedirects, 0).addingReportingOverflow(2)
        self.maximumDroppedAnswers = overflow ? .max : dropped
    }

    /// An attempt failed with a transient error after bringing `gained` new bytes, `missing` having been missing
    /// before it (`nil`: the length is unknown).
    mutating func retrying(gained: Int64, missing: Int64?) -> Decision {
        Self.add(gained, to: &gainedSinceProgress)
        if gainedSinceProgress >= Self.progressFloor(missing: missing) {
            failuresInARow = 1
            gainedSinceProgress = 0
            droppedAnswersInARow = 0
        } else {
            failuresInARow += 1
        }
        return failuresInARow <= maximumRetries ? .retry(attempt: failuresInARow) : .stop
    }

    /// The answer asks for another request at once, after bringing `gained` new bytes of the `asked` its request
    /// asked for (`nil`: to an unknown end), `missing` having been missing before it; `bodyEnded`: it was a body read
    /// to its end.
    mutating func askingAgain(gained: Int64, missing: Int64?, asked: Int64?, bodyEnded: Bool) -> Decision {
        if bodyEnded {
            let broughtAllAsked = asked.map { gained >= $0 } ?? false
            // Short bodies must average the floor since the count last started: one 4 KiB answer after ten one-byte
            // ones does not start it again (a request per byte and a bit), a server capping every 206 at 4 KiB does.
            Self.add(gained, to: &bodyGainedSinceProgress)
            let (needed, overflow) = Self.bodyFloor(missing: missing, asked: asked)
                .multipliedReportingOverflow(by: Int64(fruitlessBodiesInARow + 1))
            if broughtAllAsked || (!overflow && bodyGainedSinceProgress >= needed) {
                fruitlessBodiesInARow = 0
                bodyGainedSinceProgress = 0
            } else {
                fruitlessBodiesInARow += 1
            }
            // Failures need more: a body that brought all it was asked for (each gap of a version 2 token through a
            // link that cuts connections) or the failures' own floor clears them; a smaller one adds its bytes, so
            // that 4 KiB answers between one-byte cuts cannot clear the cuts forever.
            Self.add(gained, to: &gainedSinceProgress)
            if broughtAllAsked || gainedSinceProgress >= Self.progressFloor(missing: missing) {
                failuresInARow = 0
                gainedSinceProgress = 0
                droppedAnswersInARow = 0
            }
        } else if gained >= Self.progressFloor(missing: missing) {
            // A multi-connection phase that brought the floor and asks again.
            droppedAnswersInARow = 0
        } else {
            droppedAnswersInARow += 1
        }
        return fruitlessBodiesInARow <= Self.maximumFruitlessBodies && droppedAnswersInARow <= maximumDroppedAnswers
            ? .askAgain : .stop
    }

    /// Adds the bytes an answer brought (never negative) to a running sum, saturating rather than trapping.
    private static func add(_ gained: Int64, to sum: inout Int64) {
        let (total, overflow) = sum.addingReportingOverflow(max(gained, 0))
        sum = overflow ? .max : total
    }

    /// Why ``askingAgain(gained:missing:asked:bodyEnded:)`` said stop.
    var fruitlessError: ResumableError {
        if droppedAnswersInARow > maximumDroppedAnswers {
            return ResumableError(
                .redirect,
                "the server answered \(droppedAnswersInARow) requests in a row with a redirect (or another answer "
                    + "dropped at its head) without bringing the file \(Self.minimumProgress >> 10) KiB further")
        }
        return ResumableError(
            .protocolViolation,
            "the server answered \(fruitlessBodiesInARow) requests in a row without bringing the file further "
                + "(or by less than \(Self.minimumBodyProgress >> 10) KiB each)")
    }
}
