import Testing

@testable import Resumable

/// Data-driven tests for `ContentRange`, with cases in `Fixtures/headers/content-range.json`.
struct ContentRangeTests {
    /// One fixture case: an input and either the expected range or `valid: false`.
    struct Case: Decodable, Sendable, CustomTestStringConvertible {
        let name: String
        let input: String
        let valid: Bool
        let unsatisfied: Bool?
        let first: Int64?
        let last: Int64?
        let complete: Int64?

        var testDescription: String { name }

        /// The value the fixture expects, or nil when the input must be rejected.
        var expected: ContentRange.Value? {
            guard valid else { return nil }
            if unsatisfied == true {
                return complete.map { .unsatisfied(completeLength: $0) }
            }
            guard let first, let last else { return nil }
            return .satisfied(first: first, last: last, completeLength: complete)
        }
    }

    static let cases: [Case] = (try? Fixtures.decode([Case].self, from: "headers/content-range.json")) ?? []

    @Test("The fixture file loads and has cases")
    func fixtureLoads() throws {
        let cases = try Fixtures.decode([Case].self, from: "headers/content-range.json")
        #expect(cases.count > 40)
        #expect(cases.allSatisfy { !$0.valid || $0.expected != nil })
    }

    @Test("A Content-Range value parses to the expected range or is rejected", arguments: cases)
    func parses(_ fixture: Case) {
        #expect(ContentRange(fixture.input)?.value == fixture.expected)
    }

    @Test("Rejected values stay rejected whatever whitespace surrounds them", arguments: cases.filter { !$0.valid })
    func rejectsWithSurroundingWhitespace(_ fixture: Case) {
        #expect(ContentRange(" \(fixture.input)\t") == nil)
    }

    @Test("Equal headers parse to equal, hashable values")
    func valuesAreHashable() {
        let parsed = Set(["bytes 0-1/2", "BYTES 0-1/2", " bytes 0-1/2 "].compactMap(ContentRange.init))
        #expect(parsed.count == 1)
    }
}
