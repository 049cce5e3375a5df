import Foundation

/// Locates and decodes the JSON fixtures kept in the package's `Fixtures/` directory.
///
/// Paths are relative to `Fixtures/`, e.g. `"headers/content-range.json"`. The directory is found from this
/// source file's location (`Tests/ResumableTests/Support/Fixtures.swift` is four levels below the package root),
/// so no resource bundle is needed and the tests run from any working directory.
enum Fixtures {
    /// The `Fixtures/` directory at the package root.
    static let directory: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // Support
        .deletingLastPathComponent()  // ResumableTests
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()  // package root
        .appendingPathComponent("Fixtures", isDirectory: true)

    /// The URL of the fixture at `relativePath` inside `Fixtures/`.
    static func url(_ relativePath: String) -> URL {
        directory.appendingPathComponent(relativePath, isDirectory: false)
    }

    /// Decodes the JSON fixture at `relativePath` inside `Fixtures/` as `type`.
    static func decode<T: Decodable>(_ type: T.Type, from relativePath: String) throws -> T {
        let data = try Data(contentsOf: url(relativePath))
        return try JSONDecoder().decode(type, from: data)
    }
}
