import Foundation
import Testing

@testable import Resumable

/// Data-driven tests for `RetryAfter`, with cases in `Fixtures/headers/retry-after.json`.
struct RetryAfterTests {
    /// One fixture case: an input, the reference "now" in Unix seconds, and the expected delay (nil when invalid).
    struct Case: Decodable, Sendable, CustomTestStringConvertible {
        let name: String
        let input: String
        let now: Int64
        let expectedSeconds: Int64?

        var testDescription: String { name }
    }

    static let cases: [Case] = (try? Fixtures.decode([Case].self, from: "headers/retry-after.json")) ?? []

    @Test("The fixture file loads and has cases")
    func fixtureLoads() throws {
        let cases = try Fixtures.decode([Case].self, from: "headers/retry-after.json")
        #expect(cases.count > 15)
    }

    @Test("A Retry-After value gives the expected delay or is rejected", arguments: cases)
    func delays(_ fixture: Case) {
        let now = Date(timeIntervalSince1970: TimeInterval(fixture.now))
        #expect(RetryAfter.delay(fixture.input, now: now) == fixture.expectedSeconds.map { .seconds($0) })
    }

    @Test("A date delay keeps the fraction of a second left until it")
    func keepsFractions() {
        let now = Date(timeIntervalSince1970: 1_717_200_000.25)
        #expect(RetryAfter.delay("Sat, 01 Jun 2024 00:00:01 GMT", now: now) == .milliseconds(750))
    }

    @Test("An extreme clock never traps", arguments: [-Double.infinity, .infinity, .nan, -1e300, 1e300])
    func extremeClock(_ seconds: Double) {
        let delay = RetryAfter.delay("Sat, 01 Jun 2024 00:00:01 GMT", now: Date(timeIntervalSince1970: seconds))
        #expect(delay.map { $0 >= .zero } == true)
    }
}
