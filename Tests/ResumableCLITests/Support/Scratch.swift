import Foundation
import LoopbackServer
import Resumable

/// A fresh directory under the system's temporary directory, removed when released.
final class ScratchDirectory: Sendable {
    /// The directory.
    let url: URL

    init() throws {
        url = URL(fileURLWithPath: NSTemporaryDirectory(), isDirectory: true)
            .appendingPathComponent("resumable-cli-tests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit {
        try? FileManager.default.removeItem(at: url)
    }

    /// A path inside the directory.
    func file(_ name: String) -> URL {
        url.appendingPathComponent(name, isDirectory: false)
    }

    /// A new subdirectory.
    func subdirectory(_ name: String) throws -> URL {
        let directory = url.appendingPathComponent(name, isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    /// The names in `directory` (the scratch directory by default), hidden ones included, sorted.
    func contents(of directory: URL? = nil) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: (directory ?? url).path)) ?? []).sorted()
    }

    /// The library's temporary files in `directory` (the scratch directory by default).
    func partialFiles(in directory: URL? = nil) -> [String] {
        contents(of: directory).filter { $0.hasPrefix(".resumable-") && $0.hasSuffix(".partial") }
    }

    /// The size of the largest partial file in the scratch directory, 0 when there is none.
    func largestPartialFileSize() -> Int64 {
        partialFiles().compactMap { name in
            (try? FileManager.default.attributesOfItem(atPath: file(name).path)[.size] as? NSNumber)?.int64Value
        }.max() ?? 0
    }
}

/// A loopback server with one generated file, and helpers to check what the CLI did with it.
struct ServedFile {
    /// The server.
    let server: LoopbackServer
    /// The path the file is served at.
    let path: String
    /// The content's length.
    let length: Int64
    /// The content seed.
    let seed: UInt64

    /// Serves `length` deterministic bytes at `path`, optionally throttled.
    init(length: Int64 = 256 * 1024, path: String = "/file.bin", seed: UInt64 = 7, behavior: Behavior = .normal)
        throws
    {
        server = try LoopbackServer()
        self.path = path
        self.length = length
        self.seed = seed
        server.register(
            .generated(
                length: length, seed: seed, lastModified: "Mon, 02 Nov 2026 10:00:00 GMT",
                behavior: behavior),
            at: path)
    }

    /// The file's URL as a string.
    var url: String { server.url(for: path).absoluteString }

    /// The expected content.
    var bytes: Data { Data(Resource.generatedBytes(seed: seed, range: 0..<length)) }

    /// Changes how the server behaves for the file, keeping its content and validators.
    func setBehavior(_ behavior: Behavior) {
        guard var resource = server.resource(at: path) else { return }
        resource.behavior = behavior
        server.register(resource, at: path)
    }

    /// The `Range` headers of the requests for the file, in order.
    var ranges: [String?] { server.requests(for: path).map { $0.header("Range") } }
}

/// Decodes a JSON object printed by the CLI.
func jsonObject(_ text: String) throws -> [String: Any] {
    let object = try JSONSerialization.jsonObject(with: Data(text.utf8))
    guard let dictionary = object as? [String: Any] else {
        throw CocoaError(.coderReadCorrupt)
    }
    return dictionary
}
