import Foundation

/// A fresh directory under the system's temporary directory, removed when the value is released.
final class TemporaryDirectory: Sendable {
    let url: URL

    /// A new directory in `parent` (the system's temporary directory by default).
    init(in parent: String = NSTemporaryDirectory()) throws {
        url = URL(fileURLWithPath: parent, isDirectory: true)
            .appendingPathComponent("resumable-tests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit {
        try? FileManager.default.removeItem(at: url)
    }

    var path: String { url.path }

    /// The names in the directory, sorted, hidden ones included.
    func contents() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []).sorted()
    }
}
