import Testing

@testable import Resumable

@Suite("AttemptLimits: answers in a row that bring the file no further")
struct AttemptLimitsTests {
    @Test("Failures in a row are retried up to the maximum; one that brought bytes counts as the first again")
    func retries() {
        var limits = AttemptLimits(maximumRetries: 2)
        #expect(limits.retrying(progressed: false) == .retry(attempt: 1))
        #expect(limits.retrying(progressed: false) == .retry(attempt: 2))
        #expect(limits.retrying(progressed: true) == .retry(attempt: 1))
        #expect(limits.retrying(progressed: false) == .retry(attempt: 2))
        #expect(limits.retrying(progressed: false) == .stop)
    }

    @Test("No retries allowed: the first failure stops")
    func noRetries() {
        var limits = AttemptLimits(maximumRetries: 0)
        #expect(limits.retrying(progressed: true) == .stop)
    }

    @Test("Bodies that leave the file where it was stop the download after the maximum; growth resets the count")
    func fruitlessBodies() {
        var limits = AttemptLimits(maximumRetries: 3)
        for _ in 0..<AttemptLimits.maximumFruitlessBodies {
            #expect(limits.askingAgain(progressed: false, bodyEnded: true) == .askAgain)
        }
        #expect(limits.askingAgain(progressed: true, bodyEnded: true) == .askAgain)
        for _ in 0..<AttemptLimits.maximumFruitlessBodies {
            #expect(limits.askingAgain(progressed: false, bodyEnded: true) == .askAgain)
        }
        #expect(limits.askingAgain(progressed: false, bodyEnded: true) == .stop)
        #expect(limits.fruitlessError.code == .protocolViolation)
    }

    @Test("Answers dropped at their head (redirects, fall-backs) never count")
    func headAnswersDoNotCount() {
        var limits = AttemptLimits(maximumRetries: 3)
        for _ in 0..<(AttemptLimits.maximumFruitlessBodies * 3) {
            #expect(limits.askingAgain(progressed: false, bodyEnded: false) == .askAgain)
        }
        // They do not reset the count of fruitless bodies either.
        for _ in 0..<AttemptLimits.maximumFruitlessBodies {
            #expect(limits.askingAgain(progressed: false, bodyEnded: true) == .askAgain)
        }
        #expect(limits.askingAgain(progressed: false, bodyEnded: false) == .askAgain)
        #expect(limits.askingAgain(progressed: false, bodyEnded: true) == .stop)
    }
}
