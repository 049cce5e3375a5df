import Foundation
import Testing

@testable import Resumable

/// ``TokenBucket`` on a synthetic clock: instants are offsets from one reading, and every expectation is exact.
@Suite("Token bucket")
struct TokenBucketTests {
    let t0 = ContinuousClock.now

    func at(_ offset: Duration) -> ContinuousClock.Instant {
        t0.advanced(by: offset)
    }

    /// `bucket.reserve`, callable inside `#expect` (which cannot call a mutating method).
    func reserve(_ bucket: inout TokenBucket, _ bytes: Int, now: ContinuousClock.Instant) -> Duration {
        bucket.reserve(bytes, now: now)
    }

    @Test("The burst passes at once, then every byte costs 1/rate")
    func burstThenRate() {
        // 1000 B/s: the burst is the 16 KiB minimum, 16.384 s worth.
        var bucket = TokenBucket(bytesPerSecond: 1000)
        #expect(bucket.burstBytes == 16_384)
        #expect(reserve(&bucket, 16_384, now: t0) == .zero)
        #expect(reserve(&bucket, 1000, now: t0) == .seconds(1))
        #expect(reserve(&bucket, 1, now: t0) == .milliseconds(1001))
        // Time that passed pays the backlog off: 1.001 s later nothing is owed, and one more byte costs 1 ms over.
        #expect(reserve(&bucket, 1, now: at(.milliseconds(1001))) == .milliseconds(1))
        // Idle time is not saved up beyond the burst.
        #expect(reserve(&bucket, 16_384, now: at(.seconds(1000))) == .zero)
        #expect(reserve(&bucket, 500, now: at(.seconds(1000))) == .milliseconds(500))
    }

    @Test("A fast rate allows 50 ms of it at once")
    func burstOfFiftyMilliseconds() {
        var bucket = TokenBucket(bytesPerSecond: 2_000_000)
        #expect(bucket.burstBytes == 100_000)
        #expect(reserve(&bucket, 100_000, now: t0) == .zero)
        #expect(reserve(&bucket, 2_000, now: t0) == .milliseconds(1))
        // A piece bigger than the burst waits for the part beyond it.
        var fresh = TokenBucket(bytesPerSecond: 2_000_000)
        #expect(reserve(&fresh, 600_000, now: t0) == .milliseconds(250))
    }

    @Test("A cost that is not a whole number of attoseconds is rounded up")
    func roundsUp() {
        var bucket = TokenBucket(bytesPerSecond: 3)
        #expect(reserve(&bucket, 16_384, now: t0) == .zero)
        // One byte at 3 B/s: 333_333_333_333_333_333.33… as, so 333_333_333_333_333_334 as.
        #expect(
            reserve(&bucket, 1, now: t0) == Duration(secondsComponent: 0, attosecondsComponent: 333_333_333_333_333_334)
        )
    }

    @Test("Connections sharing a bucket are served in turn and get the rate between them")
    func fifoSharing() {
        let rate = 1_000_000
        let piece = 16_384
        var bucket = TokenBucket(bytesPerSecond: rate)
        let burst = bucket.burstBytes!
        // Three connections, each reserving its next piece the moment its last one was allowed.
        var ready = [t0, t0, t0]
        var received = [0, 0, 0]
        var lastRelease = t0
        for _ in 0..<3_000 {
            // The earliest-ready connection goes next (the first one on ties), as threads would.
            let next = ready.indices.min { ready[$0] < ready[$1] }!
            let now = ready[next]
            let release = now.advanced(by: bucket.reserve(piece, now: now))
            received[next] += piece
            ready[next] = release
            lastRelease = max(lastRelease, release)
        }
        let total = received.reduce(0, +)
        // Fair: whoever came first may have taken the burst, and from then on they took turns; the gap does not grow
        // over 3000 pieces.
        #expect(received.max()! - received.min()! <= burst + piece)
        #expect(received.min()! >= 990 * piece)
        // Exact: everything beyond the burst was let through at the rate, and not a byte earlier.
        #expect(lastRelease == t0.advanced(by: TokenBucket.duration(TokenBucket.cost(total - burst, rate: rate))))
        // And never faster than rate × time + burst at any release.
        var bucket2 = TokenBucket(bytesPerSecond: rate)
        var passed = 0
        for step in 0..<500 {
            let now = at(.microseconds(step * 100))
            let wait = bucket2.reserve(piece, now: now)
            passed += piece
            let elapsed = TokenBucket.attoseconds(now.advanced(by: wait) - t0)
            #expect(Int128(passed - burst) * 1_000_000_000_000_000_000 <= elapsed * Int128(rate))
        }
    }

    @Test("A lower rate applies to later bytes; earlier ones keep their time")
    func lowerRateMidStream() {
        var bucket = TokenBucket(bytesPerSecond: 2_000_000)
        #expect(reserve(&bucket, 100_000, now: t0) == .zero)
        #expect(reserve(&bucket, 200_000, now: t0) == .milliseconds(100))
        let rescaling = bucket.setRate(1_000_000, now: t0)
        #expect(rescaling.kind == .unchanged)
        #expect(rescaling.apply(to: at(.milliseconds(100))) == at(.milliseconds(100)))
        #expect(bucket.bytesPerSecond == 1_000_000)
        // The backlog ends at 150 ms; 100 kB more at 1 MB/s end at 250 ms, less the 50 ms burst.
        #expect(reserve(&bucket, 100_000, now: t0) == .milliseconds(200))
    }

    @Test("A higher rate shortens what waits in proportion, and later bytes queue behind it")
    func higherRateMidStream() {
        var bucket = TokenBucket(bytesPerSecond: 2_000_000)
        #expect(reserve(&bucket, 100_000, now: t0) == .zero)
        #expect(reserve(&bucket, 200_000, now: t0) == .milliseconds(100))
        // At 10 ms: 140 ms of backlog left at 2 MB/s is 70 ms at 4 MB/s.
        let rescaling = bucket.setRate(4_000_000, now: at(.milliseconds(10)))
        #expect(rescaling.apply(to: at(.milliseconds(100))) == at(.milliseconds(55)))
        // A deadline already passed stays.
        #expect(rescaling.apply(to: at(.milliseconds(5))) == at(.milliseconds(5)))
        // Backlog to 80 ms; 200 kB more cost 50 ms (to 130 ms), less the 50 ms burst: 80 ms, i.e. 70 ms from 10 ms.
        #expect(reserve(&bucket, 200_000, now: at(.milliseconds(10))) == .milliseconds(70))
    }

    @Test("Unlimited lets everything through, releases waiters, and a new limit starts with a full burst")
    func unlimited() {
        var bucket = TokenBucket(bytesPerSecond: nil)
        #expect(bucket.burstBytes == nil)
        #expect(reserve(&bucket, Int.max, now: t0) == .zero)
        #expect(reserve(&bucket, Int.max, now: t0) == .zero)
        bucket.setRate(1000, now: t0)
        #expect(reserve(&bucket, 16_384, now: t0) == .zero)
        #expect(reserve(&bucket, 1000, now: t0) == .seconds(1))
        let rescaling = bucket.setRate(nil, now: at(.milliseconds(500)))
        #expect(rescaling.apply(to: at(.seconds(1))) == at(.milliseconds(500)))
        #expect(reserve(&bucket, 1 << 30, now: at(.milliseconds(500))) == .zero)
        bucket.setRate(1000, now: at(.seconds(2)))
        #expect(reserve(&bucket, 16_384, now: at(.seconds(2))) == .zero)
        #expect(reserve(&bucket, 1000, now: at(.seconds(2))) == .seconds(1))
        // Zero and negative rates are unlimited too.
        #expect(TokenBucket(bytesPerSecond: 0).bytesPerSecond == nil)
        #expect(TokenBucket(bytesPerSecond: -5).bytesPerSecond == nil)
        bucket.setRate(0, now: t0)
        #expect(bucket.bytesPerSecond == nil)
    }

    @Test("Huge counts and rates never trap: the backlog stops at its limit")
    func hugeValues() {
        var slow = TokenBucket(bytesPerSecond: 1)
        let first = slow.reserve(Int.max, now: t0)
        #expect(first == TokenBucket.maximumBacklog - .seconds(16_384))
        for _ in 0..<100 {
            #expect(reserve(&slow, Int.max, now: t0) == first)
        }
        #expect(reserve(&slow, -1, now: t0) == first)
        #expect(reserve(&slow, Int.min, now: t0) == first)
        // Rescaling the longest backlog by the largest ratio.
        let rescaling = slow.setRate(Int.max, now: t0)
        #expect(rescaling.apply(to: t0.advanced(by: TokenBucket.maximumBacklog)) > t0)
        var fast = TokenBucket(bytesPerSecond: Int.max)
        #expect(fast.burstBytes == Int.max / 20)
        #expect(reserve(&fast, Int.max / 20, now: t0) == .zero)
        #expect(reserve(&fast, Int.max, now: t0) > .zero)
        fast.setRate(Int.max - 1, now: t0)
        fast.setRate(Int.max, now: t0)
        #expect(reserve(&fast, Int.max, now: t0) > .zero)
    }
}
