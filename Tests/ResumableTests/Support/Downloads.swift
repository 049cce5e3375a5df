import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Shared set-up for end-to-end tests: a loopback server, a scratch directory, fast retries.
struct DownloadFixture {
    let server: LoopbackServer
    let directory: TemporaryDirectory

    init() throws {
        server = try LoopbackServer()
        directory = try TemporaryDirectory()
    }

    /// A configuration with quick retries, so failure paths stay fast.
    static func configuration(
        retries: Int = 3,
        headers: [String: String] = [:],
        existingFile: DownloadTask.ExistingFilePolicy = .chooseFreeName
    ) -> DownloadTask.Configuration {
        DownloadTask.Configuration(
            headers: headers,
            existingFile: existingFile,
            retry: .init(maximumRetries: retries, initialDelay: .milliseconds(10), maximumDelay: .milliseconds(50)),
            idleTimeout: .seconds(10)
        )
    }

    /// Registers `resource` at `path` and returns its URL.
    @discardableResult
    func serve(_ resource: Resource, at path: String = "/file.bin") -> URL {
        server.register(resource, at: path)
        return server.url(for: path)
    }

    /// Starts a download of `path` into the scratch directory.
    func download(
        _ path: String = "/file.bin",
        configuration: DownloadTask.Configuration = DownloadFixture.configuration()
    ) throws -> DownloadTask {
        try DownloadTask(
            url: server.url(for: path),
            destination: .directory(directory.url),
            configuration: configuration
        )
    }

    /// The bytes of a file.
    func contents(of url: URL) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: url))
    }

    /// The hidden temporary files in the scratch directory.
    func temporaryFiles() -> [String] {
        directory.contents().filter { TemporaryFileName.isValid($0) }
    }

    /// The `Range` headers the server saw for `path`, in order.
    func ranges(_ path: String = "/file.bin") -> [String?] {
        server.requests(for: path).map { $0.header("Range") }
    }
}

/// Deterministic test content.
func testBytes(count: Int, seed: UInt64 = 1) -> [UInt8] {
    Resource.generatedBytes(seed: seed, range: 0..<Int64(count))
}
