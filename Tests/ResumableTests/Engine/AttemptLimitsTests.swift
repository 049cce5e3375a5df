import Testing

@testable import Resumable

@Suite("AttemptLimits: answers in a row that bring the file no further")
struct AttemptLimitsTests {
    static let enough = AttemptLimits.minimumProgress
    static let length: Int64 = 1 << 30

    @Test("Failures in a row are retried up to the maximum; one that brought enough bytes counts as the first again")
    func retries() {
        var limits = AttemptLimits(maximumRetries: 2)
        #expect(limits.retrying(gained: 0, expectedLength: Self.length) == .retry(attempt: 1))
        #expect(limits.retrying(gained: 0, expectedLength: Self.length) == .retry(attempt: 2))
        #expect(limits.retrying(gained: Self.enough, expectedLength: Self.length) == .retry(attempt: 1))
        #expect(limits.retrying(gained: 0, expectedLength: Self.length) == .retry(attempt: 2))
        #expect(limits.retrying(gained: 0, expectedLength: Self.length) == .stop)
    }

    @Test("No retries allowed: the first failure stops")
    func noRetries() {
        var limits = AttemptLimits(maximumRetries: 0)
        #expect(limits.retrying(gained: Self.enough, expectedLength: Self.length) == .stop)
    }

    /// Noticed in an earlier review: each byte reset the count, so a server sending one byte per connection kept a
    /// download crawling at one stall per byte for as long as the file had bytes.
    @Test("Failures that each brought less than the floor count in a row, however many bytes they add up to")
    func tricklesCountAsFailures() {
        var limits = AttemptLimits(maximumRetries: 3)
        for attempt in 1...3 {
            #expect(limits.retrying(gained: 1, expectedLength: Self.length) == .retry(attempt: attempt))
        }
        #expect(limits.retrying(gained: Self.enough - 1, expectedLength: Self.length) == .stop)
        // Without a known length the floor is the same.
        var unknown = AttemptLimits(maximumRetries: 1)
        #expect(unknown.retrying(gained: Self.enough - 1, expectedLength: nil) == .retry(attempt: 1))
        #expect(unknown.retrying(gained: Self.enough - 1, expectedLength: nil) == .stop)
    }

    @Test("The floor is a sixteenth of a small file, at least a byte, and never more than 64 KiB")
    func floor() {
        #expect(AttemptLimits.progressFloor(expectedLength: nil) == Self.enough)
        #expect(AttemptLimits.progressFloor(expectedLength: Self.length) == Self.enough)
        #expect(AttemptLimits.progressFloor(expectedLength: 16 * Self.enough) == Self.enough)
        #expect(AttemptLimits.progressFloor(expectedLength: 16_000) == 1000)
        #expect(AttemptLimits.progressFloor(expectedLength: 10) == 1)
        #expect(AttemptLimits.progressFloor(expectedLength: 0) == 1)
        #expect(AttemptLimits.progressFloor(expectedLength: -5) == 1)
        // A flaky link finishes a small file a sixteenth at a time.
        var limits = AttemptLimits(maximumRetries: 1)
        for _ in 0..<15 {
            #expect(limits.retrying(gained: 1000, expectedLength: 16_000) == .retry(attempt: 1))
        }
    }

    @Test("Bodies that leave the file where it was stop the download after the maximum; growth resets the count")
    func fruitlessBodies() {
        var limits = AttemptLimits(maximumRetries: 3)
        for _ in 0..<AttemptLimits.maximumFruitlessBodies {
            #expect(limits.askingAgain(gained: 0, expectedLength: Self.length, bodyEnded: true) == .askAgain)
        }
        #expect(limits.askingAgain(gained: Self.enough, expectedLength: Self.length, bodyEnded: true) == .askAgain)
        for _ in 0..<AttemptLimits.maximumFruitlessBodies {
            #expect(limits.askingAgain(gained: 0, expectedLength: Self.length, bodyEnded: true) == .askAgain)
        }
        #expect(limits.askingAgain(gained: 0, expectedLength: Self.length, bodyEnded: true) == .stop)
        #expect(limits.fruitlessError.code == .protocolViolation)
    }

    @Test("Short bodies that each bring less than the floor are fruitless: a one-byte 206 again and again ends")
    func tinyBodiesAreFruitless() {
        var limits = AttemptLimits(maximumRetries: 3)
        for _ in 0..<AttemptLimits.maximumFruitlessBodies {
            #expect(limits.askingAgain(gained: 1, expectedLength: Self.length, bodyEnded: true) == .askAgain)
        }
        #expect(limits.askingAgain(gained: 1, expectedLength: Self.length, bodyEnded: true) == .stop)
    }

    @Test("Answers dropped at their head (redirects, fall-backs) never count")
    func headAnswersDoNotCount() {
        var limits = AttemptLimits(maximumRetries: 3)
        for _ in 0..<(AttemptLimits.maximumFruitlessBodies * 3) {
            #expect(limits.askingAgain(gained: 0, expectedLength: Self.length, bodyEnded: false) == .askAgain)
        }
        // They do not reset the count of fruitless bodies either.
        for _ in 0..<AttemptLimits.maximumFruitlessBodies {
            #expect(limits.askingAgain(gained: 0, expectedLength: Self.length, bodyEnded: true) == .askAgain)
        }
        #expect(limits.askingAgain(gained: Self.enough, expectedLength: Self.length, bodyEnded: false) == .askAgain)
        #expect(limits.askingAgain(gained: 0, expectedLength: Self.length, bodyEnded: true) == .stop)
    }
}
