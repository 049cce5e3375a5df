import Foundation
import Testing

@testable import Resumable

/// Data-driven tests for `HTTPDate`, with cases in `Fixtures/headers/http-date.json`.
struct HTTPDateTests {
    /// One fixture case: an input, the expected Unix seconds (nil when invalid) and, for RFC 850 dates, the
    /// reference "now" used to resolve two-digit years.
    struct Case: Decodable, Sendable, CustomTestStringConvertible {
        let name: String
        let input: String
        let expected: Int64?
        let now: Int64?
        let canonical: Bool?

        var testDescription: String { name }
    }

    static let cases: [Case] = (try? Fixtures.decode([Case].self, from: "headers/http-date.json")) ?? []

    @Test("The fixture file loads and has cases")
    func fixtureLoads() throws {
        let cases = try Fixtures.decode([Case].self, from: "headers/http-date.json")
        #expect(cases.count > 40)
    }

    @Test("An HTTP-date parses to the expected instant or is rejected", arguments: cases)
    func parses(_ fixture: Case) {
        let now = Date(timeIntervalSince1970: TimeInterval(fixture.now ?? 1_717_200_000))
        let parsed = HTTPDate.parse(fixture.input, now: now)
        #expect(parsed.map { Int64($0.timeIntervalSince1970) } == fixture.expected)
    }

    @Test("Formatting a canonical IMF-fixdate reproduces it", arguments: cases.filter { $0.canonical == true })
    func formatsCanonicalDates(_ fixture: Case) throws {
        let seconds = try #require(fixture.expected)
        #expect(HTTPDate.format(Date(timeIntervalSince1970: TimeInterval(seconds))) == fixture.input)
    }

    @Test("Formatting then parsing returns the same whole second")
    func roundTrips() {
        var seconds: Int64 = -62_135_596_800
        while seconds < 253_402_300_799 {
            let date = Date(timeIntervalSince1970: TimeInterval(seconds))
            #expect(HTTPDate.parse(HTTPDate.format(date)) == date)
            seconds += 987_654_321
        }
    }

    @Test("Formatting drops fractional seconds toward the past")
    func formatsFractions() {
        #expect(HTTPDate.format(Date(timeIntervalSince1970: 0.999)) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.format(Date(timeIntervalSince1970: -0.5)) == "Wed, 31 Dec 1969 23:59:59 GMT")
    }

    @Test("Formatting clamps instants a four-digit year cannot express")
    func formatsExtremes() {
        #expect(HTTPDate.format(.distantFuture) == "Mon, 01 Jan 4001 00:00:00 GMT")
        #expect(HTTPDate.format(Date(timeIntervalSince1970: 1e15)) == "Fri, 31 Dec 9999 23:59:59 GMT")
        #expect(HTTPDate.format(Date(timeIntervalSince1970: .infinity)) == "Fri, 31 Dec 9999 23:59:59 GMT")
        #expect(HTTPDate.format(Date(timeIntervalSince1970: -.infinity)) == "Mon, 01 Jan 0001 00:00:00 GMT")
        #expect(HTTPDate.format(Date(timeIntervalSince1970: .nan)).hasSuffix("GMT"))
    }

    @Test("Parsing without an explicit now resolves RFC 850 years against the clock")
    func parsesWithClock() {
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == Date(timeIntervalSince1970: 784_111_777))
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == Date(timeIntervalSince1970: 784_111_777))
    }
}
