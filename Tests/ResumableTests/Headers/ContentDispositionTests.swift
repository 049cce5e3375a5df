import Testing

@testable import Resumable

/// Data-driven tests for `ContentDisposition`, with cases in `Fixtures/headers/content-disposition.json`.
struct ContentDispositionTests {
    /// One fixture case: an input and either the expected fields or `valid: false`.
    struct Case: Decodable, Sendable, CustomTestStringConvertible {
        let name: String
        let input: String
        let valid: Bool
        let type: String?
        let filename: String?
        let extendedFilename: String?
        let preferred: String?

        var testDescription: String { name }
    }

    static let cases: [Case] = (try? Fixtures.decode([Case].self, from: "headers/content-disposition.json")) ?? []

    @Test("The fixture file loads and has cases")
    func fixtureLoads() throws {
        let cases = try Fixtures.decode([Case].self, from: "headers/content-disposition.json")
        #expect(cases.count > 50)
    }

    @Test("A Content-Disposition value parses to the expected filenames or is rejected", arguments: cases)
    func parses(_ fixture: Case) {
        let parsed = ContentDisposition(fixture.input)
        if fixture.valid {
            #expect(parsed?.type == fixture.type)
            #expect(parsed?.filename == fixture.filename)
            #expect(parsed?.extendedFilename == fixture.extendedFilename)
            #expect(parsed?.preferredFilename == fixture.preferred)
        } else {
            #expect(parsed == nil)
        }
    }

    @Test("Decoded names keep their exact scalars")
    func keepsScalars() throws {
        let parsed = try #require(ContentDisposition("attachment; filename*=UTF-8''foo-a%cc%88.html"))
        #expect(parsed.extendedFilename?.unicodeScalars.map(\.value) == "foo-a\u{308}.html".unicodeScalars.map(\.value))
    }
}
