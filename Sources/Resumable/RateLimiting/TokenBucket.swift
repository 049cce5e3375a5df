/// A bandwidth limit as a pure value: how long each piece of data must wait so that the bytes let through never
/// exceed a rate, with a small burst. No clock reads and no locks: the caller passes the time and serializes calls
/// (``RateLimiter`` does both).
///
/// It is a GCRA ("generic cell rate algorithm", virtual scheduling): the bucket keeps the *theoretical arrival
/// time* (TAT), the instant at which every byte reserved so far has been paid for at the rate. A reservation of `n`
/// bytes moves the TAT `n / rate` seconds later (from now when the bucket was idle) and must wait until the new TAT
/// minus the burst tolerance. So, from any instant `t0` at which the bucket is idle, the bytes let through by `t`
/// never exceed `rate × (t − t0) + burst`, and reservations are served in the order they were made: several
/// connections sharing one bucket get the rate between them.
///
/// Arithmetic is exact, in integer attoseconds (a reservation's cost is rounded up, so rounding never lets a byte
/// through early), and total: no byte count, rate or instant makes it trap; a backlog longer than
/// ``maximumBacklog`` is cut there.
struct TokenBucket: Sendable {
    /// The largest piece the burst always admits at once: a transport's usual read (curl's default, URLSession's).
    static let minimumBurst = 16 << 10
    /// How much of the rate the burst holds, as a fraction of a second: 50 ms, so the rate is smooth.
    static let burstDivisor = 20
    /// The longest a backlog may reach, about 31,700 years: keeps every instant and product far from overflowing.
    static let maximumBacklog: Duration = .seconds(1_000_000_000_000)

    private static let attosecondsPerSecond: Int128 = 1_000_000_000_000_000_000

    /// The rate in bytes per second; `nil` is unlimited (never below 1 otherwise).
    private(set) var bytesPerSecond: Int?
    /// When everything reserved so far is paid for at the rate; `nil` before the first reservation.
    private var theoreticalArrival: ContinuousClock.Instant?

    /// A bucket for `bytesPerSecond`; `nil`, zero or a negative value is unlimited.
    init(bytesPerSecond: Int?) {
        self.bytesPerSecond = Self.normalized(bytesPerSecond)
    }

    /// The rate a value stands for: `nil` for unlimited (`nil`, zero, negative).
    static func normalized(_ bytesPerSecond: Int?) -> Int? {
        guard let bytesPerSecond, bytesPerSecond > 0 else { return nil }
        return bytesPerSecond
    }

    /// How many bytes may pass at once after an idle time: 50 ms worth of the rate, at least ``minimumBurst``.
    var burstBytes: Int? {
        bytesPerSecond.map { max($0 / Self.burstDivisor, Self.minimumBurst) }
    }

    /// The burst as a time: how far ahead of now the TAT may be with nothing waiting.
    private var tolerance: Int128 {
        guard let rate = bytesPerSecond, let burst = burstBytes else { return 0 }
        return Self.cost(burst, rate: rate)
    }

    /// Reserves `bytes` (a negative count is zero) at `now` and returns how long the caller must wait before using
    /// them: zero while within the burst. The reservation counts at once, so later reservations queue behind it
    /// whether or not the caller waits.
    mutating func reserve(_ bytes: Int, now: ContinuousClock.Instant) -> Duration {
        guard let rate = bytesPerSecond else { return .zero }
        // An idle bucket starts from now: unused time is not saved up beyond the burst.
        let start = max(theoreticalArrival ?? now, now)
        let backlog = min(Self.attoseconds(start - now) + Self.cost(max(bytes, 0), rate: rate), Self.backlogLimit)
        theoreticalArrival = now.advanced(by: Self.duration(backlog))
        return Self.duration(max(backlog - tolerance, 0))
    }

    /// Changes the rate at `now` (`nil`, zero or negative: unlimited). The new rate applies to the bytes reserved
    /// after it; reservations made before never wait longer: a lower rate leaves their schedule as it is, a higher
    /// one shortens it in proportion (unlimited: to nothing).
    ///
    /// - Returns: How the deadline of a reservation made before the change moves: apply it to the instants waiters
    ///   wait for, so that they go sooner when the rate rose.
    @discardableResult
    mutating func setRate(_ bytesPerSecond: Int?, now: ContinuousClock.Instant) -> Rescaling {
        let old = self.bytesPerSecond
        let new = Self.normalized(bytesPerSecond)
        self.bytesPerSecond = new
        let rescaling: Rescaling
        switch (old, new) {
        case (let old?, let new?) where new > old:
            rescaling = Rescaling(kind: .scale(from: now, numerator: old, denominator: new))
        case (_?, nil):
            rescaling = Rescaling(kind: .scale(from: now, numerator: 0, denominator: 1))
        default:
            // Lower, equal, or from unlimited (nothing is scheduled then): earlier deadlines stay.
            rescaling = Rescaling(kind: .unchanged)
        }
        if old == nil || new == nil {
            // Unlimited keeps no schedule; a new limit starts from an idle bucket.
            theoreticalArrival = nil
        } else if let arrival = theoreticalArrival {
            theoreticalArrival = rescaling.apply(to: arrival)
        }
        return rescaling
    }

    /// How the deadlines of earlier reservations move when the rate changes.
    struct Rescaling: Sendable, Equatable {
        enum Kind: Sendable, Equatable {
            case unchanged
            /// What remained after `from` takes `numerator / denominator` of the time (`numerator < denominator`).
            case scale(from: ContinuousClock.Instant, numerator: Int, denominator: Int)
        }

        let kind: Kind

        /// The new deadline of a reservation that had to wait until `deadline`.
        func apply(to deadline: ContinuousClock.Instant) -> ContinuousClock.Instant {
            guard case .scale(let from, let numerator, let denominator) = kind, deadline > from else { return deadline }
            let remaining = TokenBucket.attoseconds(deadline - from)
            // remaining × numerator / denominator, rounded up, without overflow: numerator < denominator, so the
            // quotient is at most `remaining`.
            let product = remaining.multipliedFullWidth(by: Int128(numerator))
            let (quotient, remainder) = Int128(denominator).dividingFullWidth(product)
            return from.advanced(by: TokenBucket.duration(quotient + (remainder > 0 ? 1 : 0)))
        }
    }

    // MARK: - Exact time arithmetic

    private static let backlogLimit = attoseconds(maximumBacklog)

    /// What `bytes` cost at `rate`, in attoseconds, rounded up, at most the backlog limit. `bytes × 10^18` fits in
    /// an `Int128` for any `Int`.
    static func cost(_ bytes: Int, rate: Int) -> Int128 {
        let (quotient, remainder) = (Int128(bytes) * attosecondsPerSecond).quotientAndRemainder(
            dividingBy: Int128(rate))
        return min(quotient + (remainder > 0 ? 1 : 0), backlogLimit)
    }

    static func attoseconds(_ duration: Duration) -> Int128 {
        let (seconds, attoseconds) = duration.components
        return Int128(seconds) * attosecondsPerSecond + Int128(attoseconds)
    }

    /// A duration of `attoseconds` (between zero and the backlog limit here, so the seconds fit an `Int64`).
    static func duration(_ attoseconds: Int128) -> Duration {
        let (seconds, rest) = attoseconds.quotientAndRemainder(dividingBy: attosecondsPerSecond)
        return Duration(secondsComponent: Int64(seconds), attosecondsComponent: Int64(rest))
    }
}
