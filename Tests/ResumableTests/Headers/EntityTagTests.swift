import Testing

@testable import Resumable

/// Data-driven tests for `EntityTag`, with cases in `Fixtures/headers/entity-tag.json`.
struct EntityTagTests {
    /// One fixture case: an input and either the expected parts or `valid: false`.
    struct Case: Decodable, Sendable, CustomTestStringConvertible {
        let name: String
        let input: String
        let valid: Bool
        let rawValue: String?
        let weak: Bool?
        let opaqueTag: String?

        var testDescription: String { name }
    }

    static let cases: [Case] = (try? Fixtures.decode([Case].self, from: "headers/entity-tag.json")) ?? []

    @Test("The fixture file loads and has cases")
    func fixtureLoads() throws {
        let cases = try Fixtures.decode([Case].self, from: "headers/entity-tag.json")
        #expect(cases.count > 20)
    }

    @Test("An ETag value parses to the expected parts or is rejected", arguments: cases)
    func parses(_ fixture: Case) {
        let tag = EntityTag(fixture.input)
        if fixture.valid {
            #expect(tag?.rawValue == fixture.rawValue)
            #expect(tag?.isWeak == fixture.weak)
            #expect(tag?.opaqueTag == fixture.opaqueTag)
        } else {
            #expect(tag == nil)
        }
    }

    @Test(
        "Strong comparison needs two strong, identical tags",
        arguments: [
            (#""1""#, #""1""#, true),
            (#"W/"1""#, #""1""#, false),
            (#""1""#, #"W/"1""#, false),
            (#"W/"1""#, #"W/"1""#, false),
            (#""1""#, #""2""#, false),
            (#""abc""#, #""ABC""#, false),
        ])
    func strongComparison(_ left: String, _ right: String, _ matches: Bool) throws {
        let lhs = try #require(EntityTag(left))
        let rhs = try #require(EntityTag(right))
        #expect(lhs.strongMatches(rhs) == matches)
        #expect(rhs.strongMatches(lhs) == matches)
    }

    @Test(
        "Weak comparison ignores weakness but not the opaque tag",
        arguments: [
            (#""1""#, #""1""#, true),
            (#"W/"1""#, #""1""#, true),
            (#"W/"1""#, #"W/"1""#, true),
            (#"W/"1""#, #"W/"2""#, false),
        ])
    func weakComparison(_ left: String, _ right: String, _ matches: Bool) throws {
        let lhs = try #require(EntityTag(left))
        let rhs = try #require(EntityTag(right))
        #expect(lhs.weakMatches(rhs) == matches)
    }
}
