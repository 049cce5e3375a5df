import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// The transports every end-to-end test runs with, as a test argument.
typealias TransportKind = DownloadTask.Transport

extension TransportKind {
    /// Both transports: each end-to-end test runs once per transport.
    static let all: [TransportKind] = [.urlSession, .libcurl]
}

/// Shared set-up for end-to-end tests: a loopback server, a scratch directory, fast retries.
struct DownloadFixture {
    let server: LoopbackServer
    let directory: TemporaryDirectory
    /// The transport of this fixture's downloads wherever a test did not choose one (a configuration whose
    /// transport is ``DownloadTask/Transport/automatic``).
    let transport: TransportKind

    /// With `keepAlive`, the server keeps connections open between requests (its default closes each). The scratch
    /// directory is made in `parent` (the system's temporary directory by default).
    init(transport: TransportKind = .automatic, keepAlive: Bool = false, in parent: String = NSTemporaryDirectory())
        throws
    {
        server = try LoopbackServer(configuration: .init(keepAlive: keepAlive))
        directory = try TemporaryDirectory(in: parent)
        self.transport = transport
    }

    /// A configuration with quick retries, so failure paths stay fast, and a long idle timeout, so that a download
    /// a test holds at a ``BodyGate`` never times out while a busy machine keeps the test waiting.
    static func configuration(
        retries: Int = 3,
        headers: [String: String] = [:],
        existingFile: DownloadTask.ExistingFilePolicy = .chooseFreeName,
        transport: TransportKind = .automatic
    ) -> DownloadTask.Configuration {
        DownloadTask.Configuration(
            headers: headers,
            existingFile: existingFile,
            retry: .init(maximumRetries: retries, initialDelay: .milliseconds(10), maximumDelay: .milliseconds(50)),
            idleTimeout: .seconds(600),
            // A loopback connect is never what these tests time: under a parallel run on a busy machine,
            // FoundationNetworking's work (on the global Dispatch pool that Swift concurrency shares) has been kept
            // from running for over 30 s, the default, and dozens of URLSession downloads failed at once.
            connectTimeout: .seconds(120),
            transport: transport
        )
    }

    /// `configuration` with `transport`, or else the fixture's transport when the configuration left it
    /// automatic.
    func applying(_ transport: TransportKind?, to configuration: DownloadTask.Configuration)
        -> DownloadTask.Configuration
    {
        var configuration = configuration
        if let transport {
            configuration.transport = transport
        } else if configuration.transport == .automatic {
            configuration.transport = self.transport
        }
        return configuration
    }

    /// Registers `resource` at `path` and returns its URL.
    @discardableResult
    func serve(_ resource: Resource, at path: String = "/file.bin") -> URL {
        server.register(resource, at: path)
        return server.url(for: path)
    }

    /// Starts a download of `path` into the scratch directory, with `transport` or the fixture's.
    func download(
        _ path: String = "/file.bin",
        configuration: DownloadTask.Configuration = DownloadFixture.configuration(),
        transport: TransportKind? = nil
    ) throws -> DownloadTask {
        try DownloadTask(
            url: server.url(for: path),
            destination: .directory(directory.url),
            configuration: applying(transport, to: configuration)
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

extension DownloadFixture {
    /// Downloads `path` while the server drops the connection after `bytes` body bytes, with no retries,
    /// and returns the token the failure carries.
    func interruptedToken(
        _ path: String = "/file.bin",
        after bytes: Int64,
        transport: TransportKind? = nil
    ) async throws -> ResumeToken {
        server.enqueue(behavior: Behavior(dropAfterBytes: bytes), for: path)
        let task = try download(path, configuration: DownloadFixture.configuration(retries: 0), transport: transport)
        let error = try #require(await failure(of: task))
        #expect(error.isTransient, "\(error)")
        let token = try #require(error.resumeToken, "a transient failure carries a token: \(error)")
        #expect(token.offset == bytes)
        return token
    }

    /// Resumes `token` after a trip through JSON on disk, as another process would.
    func resumeThroughDisk(
        _ token: ResumeToken,
        replacingURL: URL? = nil,
        configuration: DownloadTask.Configuration = DownloadFixture.configuration(),
        transport: TransportKind? = nil
    ) throws -> DownloadTask {
        let file = directory.url.appendingPathComponent("token.json")
        try token.write(to: file)
        let decoded = try ResumeToken(contentsOf: file)
        #expect(decoded == token)
        try FileManager.default.removeItem(at: file)
        return try DownloadTask.resume(
            from: decoded, replacingURL: replacingURL, configuration: applying(transport, to: configuration))
    }
}

/// The error `task` failed with, or `nil` (recording an issue) when it succeeded.
func failure(of task: DownloadTask) async -> ResumableError? {
    switch await task.result {
    case .success(let result):
        Issue.record("expected the download to fail, it finished: \(result)")
        return nil
    case .failure(let error):
        return error
    }
}
