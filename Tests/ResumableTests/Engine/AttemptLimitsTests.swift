import Testing

@testable import Resumable

@Suite("AttemptLimits: answers in a row that bring the file no further")
struct AttemptLimitsTests {
    static let enough = AttemptLimits.minimumProgress
    static let missing: Int64 = 1 << 30

    @Test("Failures in a row are retried up to the maximum; one that brought enough bytes counts as the first again")
    func retries() {
        var limits = AttemptLimits(maximumRetries: 2)
        #expect(limits.retrying(gained: 0, missing: Self.missing) == .retry(attempt: 1))
        #expect(limits.retrying(gained: 0, missing: Self.missing) == .retry(attempt: 2))
        #expect(limits.retrying(gained: Self.enough, missing: Self.missing) == .retry(attempt: 1))
        #expect(limits.retrying(gained: 0, missing: Self.missing) == .retry(attempt: 2))
        #expect(limits.retrying(gained: 0, missing: Self.missing) == .stop)
    }

    @Test("No retries allowed: the first failure stops")
    func noRetries() {
        var limits = AttemptLimits(maximumRetries: 0)
        #expect(limits.retrying(gained: Self.enough, missing: Self.missing) == .stop)
    }

    /// Noticed in an earlier review: each byte reset the count, so a server sending one byte per connection kept a
    /// download crawling at one stall per byte for as long as the file had bytes.
    @Test("Failures that each brought less than the floor count in a row, however many bytes they add up to")
    func tricklesCountAsFailures() {
        var limits = AttemptLimits(maximumRetries: 3)
        for attempt in 1...3 {
            #expect(limits.retrying(gained: 1, missing: Self.missing) == .retry(attempt: attempt))
        }
        // Together they bring one byte less than the floor.
        #expect(limits.retrying(gained: Self.enough - 4, missing: Self.missing) == .stop)
        // Without a known length the floor is the same.
        var unknown = AttemptLimits(maximumRetries: 1)
        #expect(unknown.retrying(gained: Self.enough / 2 - 1, missing: nil) == .retry(attempt: 1))
        #expect(unknown.retrying(gained: Self.enough / 2 - 1, missing: nil) == .stop)
    }

    /// Found by an attack (helper-65): each failure was judged alone, so a link that cut every connection after
    /// 48 KiB failed a download it used to finish, although every attempt brought real bytes.
    @Test("Failures whose bytes add up to the floor start the count again: a link that cuts every 48 KiB finishes")
    func failuresAddUp() {
        var limits = AttemptLimits(maximumRetries: 2)
        var attempts: [AttemptLimits.Decision] = []
        for _ in 0..<40 { attempts.append(limits.retrying(gained: 48 << 10, missing: Self.missing)) }
        // The first failure counts 1, the second brings the floor together and starts the count again at 1, …
        #expect(attempts.prefix(4) == [.retry(attempt: 1), .retry(attempt: 1), .retry(attempt: 2), .retry(attempt: 1)])
        #expect(attempts.allSatisfy { $0 == .retry(attempt: 1) || $0 == .retry(attempt: 2) }, "\(attempts)")
    }

    @Test(
        "A body that counts as progress clears the failures before it (a version 2 token's gaps through a flaky link)")
    func bodyProgressClearsFailures() {
        var limits = AttemptLimits(maximumRetries: 1)
        for _ in 0..<20 {
            #expect(limits.retrying(gained: 40 << 10, missing: Self.missing) == .retry(attempt: 1))
            #expect(
                limits.askingAgain(gained: 20 << 10, missing: Self.missing, asked: 20 << 10, bodyEnded: true)
                    == .askAgain)
        }
    }

    /// Found by an attack (helper-69): a floor of a sixteenth of what was missing loosened the limits as the end
    /// neared, and a server bought five more cuts for every sixteenth closer to the end (1,353 requests for 1 MiB).
    @Test("The floor is 64 KiB, or all that is missing when less, and at least a byte")
    func floor() {
        #expect(AttemptLimits.progressFloor(missing: nil) == Self.enough)
        #expect(AttemptLimits.progressFloor(missing: Self.missing) == Self.enough)
        #expect(AttemptLimits.progressFloor(missing: 16 * Self.enough) == Self.enough)
        #expect(AttemptLimits.progressFloor(missing: 16_000) == 16_000)
        #expect(AttemptLimits.progressFloor(missing: 10) == 10)
        #expect(AttemptLimits.progressFloor(missing: 0) == 1)
        #expect(AttemptLimits.progressFloor(missing: -5) == 1)
        // A flaky link finishes the last 100 KiB of a large file, 16 KiB at a time, with the default retries: the
        // attempts' bytes add up.
        var limits = AttemptLimits(maximumRetries: DownloadTask.RetryPolicy.default.maximumRetries)
        var missing: Int64 = 100 << 10
        while missing > 16 << 10 {
            #expect(limits.retrying(gained: 16 << 10, missing: missing) != .stop, "\(missing)")
            missing -= 16 << 10
        }
    }

    @Test("Bodies that leave the file where it was stop the download after the maximum; growth resets the count")
    func fruitlessBodies() {
        var limits = AttemptLimits(maximumRetries: 3)
        for _ in 0..<AttemptLimits.maximumFruitlessBodies {
            #expect(limits.askingAgain(gained: 0, missing: Self.missing, asked: nil, bodyEnded: true) == .askAgain)
        }
        #expect(
            limits.askingAgain(gained: Self.enough, missing: Self.missing, asked: nil, bodyEnded: true) == .askAgain)
        for _ in 0..<AttemptLimits.maximumFruitlessBodies {
            #expect(limits.askingAgain(gained: 0, missing: Self.missing, asked: nil, bodyEnded: true) == .askAgain)
        }
        #expect(limits.askingAgain(gained: 0, missing: Self.missing, asked: nil, bodyEnded: true) == .stop)
        #expect(limits.fruitlessError.code == .protocolViolation)
    }

    @Test("Short bodies below 4 KiB that bring less than asked are fruitless: a one-byte 206 again and again ends")
    func tinyBodiesAreFruitless() {
        var limits = AttemptLimits(maximumRetries: 3)
        for _ in 0..<AttemptLimits.maximumFruitlessBodies {
            #expect(limits.askingAgain(gained: 1, missing: Self.missing, asked: nil, bodyEnded: true) == .askAgain)
        }
        #expect(limits.askingAgain(gained: 1, missing: Self.missing, asked: nil, bodyEnded: true) == .stop)
    }

    @Test("A body that brought all it was asked is progress however short (a version 2 token's small gaps)")
    func wholeSmallAnswersAreProgress() {
        var limits = AttemptLimits(maximumRetries: 3)
        for _ in 0..<(AttemptLimits.maximumFruitlessBodies * 3) {
            #expect(limits.askingAgain(gained: 1024, missing: Self.missing, asked: 1024, bodyEnded: true) == .askAgain)
        }
        // Capped 206s of 4 KiB each are progress too: the server answers correctly, a piece at a time.
        for _ in 0..<(AttemptLimits.maximumFruitlessBodies * 3) {
            let capped = AttemptLimits.minimumBodyProgress
            #expect(limits.askingAgain(gained: capped, missing: Self.missing, asked: nil, bodyEnded: true) == .askAgain)
        }
    }

    /// Found by an attack (helper-67): a 4 KiB short body cleared every failure before it, so one-byte cuts between
    /// 4 KiB answers went on for thousands of requests.
    @Test("A short body that brought less than asked adds its bytes to the failures' floor but does not clear them")
    func shortBodiesDoNotClearFailures() {
        var limits = AttemptLimits(maximumRetries: 2)
        #expect(limits.retrying(gained: 1, missing: Self.missing) == .retry(attempt: 1))
        let capped = AttemptLimits.minimumBodyProgress
        #expect(limits.askingAgain(gained: capped, missing: Self.missing, asked: nil, bodyEnded: true) == .askAgain)
        #expect(limits.retrying(gained: 1, missing: Self.missing) == .retry(attempt: 2))
        #expect(limits.retrying(gained: 1, missing: Self.missing) == .stop)
    }

    /// Found by an attack (helper-68): a 4 KiB answer after ten one-byte ones started the fruitless count again, so
    /// eleven requests per 4 KiB went on for as long as the file had bytes.
    @Test("Short bodies must average 4 KiB: one 4 KiB answer after ten one-byte ones does not start the count again")
    func shortBodiesMustAverageTheFloor() {
        var limits = AttemptLimits(maximumRetries: 3)
        let capped = AttemptLimits.minimumBodyProgress
        for _ in 0..<AttemptLimits.maximumFruitlessBodies {
            #expect(limits.askingAgain(gained: 1, missing: Self.missing, asked: nil, bodyEnded: true) == .askAgain)
        }
        #expect(limits.askingAgain(gained: capped, missing: Self.missing, asked: nil, bodyEnded: true) == .stop)
        // Answers that each bring the floor keep going, however many.
        var steady = AttemptLimits(maximumRetries: 3)
        for _ in 0..<100 {
            #expect(steady.askingAgain(gained: capped, missing: Self.missing, asked: nil, bodyEnded: true) == .askAgain)
        }
    }

    @Test(
        "Answers dropped at their head (redirects, fall-backs) have their own limit between answers that bring the floor"
    )
    func headAnswersHaveTheirOwnLimit() {
        var limits = AttemptLimits(maximumRetries: 3, maximumRedirects: 10)
        #expect(limits.maximumDroppedAnswers == 12)
        // A whole chain of redirects, a fall-back and a dropped 200 before the first body.
        for _ in 0..<12 {
            #expect(limits.askingAgain(gained: 0, missing: Self.missing, asked: nil, bodyEnded: false) == .askAgain)
        }
        // A body that brings the floor starts the count again; a short one does not.
        #expect(
            limits.askingAgain(gained: Self.enough, missing: Self.missing, asked: nil, bodyEnded: true) == .askAgain)
        for _ in 0..<12 {
            #expect(limits.askingAgain(gained: 0, missing: Self.missing, asked: nil, bodyEnded: false) == .askAgain)
        }
        #expect(limits.askingAgain(gained: 4096, missing: Self.missing, asked: nil, bodyEnded: true) == .askAgain)
        #expect(limits.askingAgain(gained: 0, missing: Self.missing, asked: nil, bodyEnded: false) == .stop)
        #expect(limits.fruitlessError.code == .redirect)
        // They do not reset the count of fruitless bodies either.
        var bodies = AttemptLimits(maximumRetries: 3)
        for _ in 0..<AttemptLimits.maximumFruitlessBodies {
            #expect(bodies.askingAgain(gained: 0, missing: Self.missing, asked: nil, bodyEnded: true) == .askAgain)
        }
        #expect(bodies.askingAgain(gained: 0, missing: Self.missing, asked: nil, bodyEnded: false) == .askAgain)
        #expect(bodies.askingAgain(gained: 0, missing: Self.missing, asked: nil, bodyEnded: true) == .stop)
        #expect(bodies.fruitlessError.code == .protocolViolation)
    }
}
