import Foundation
import Synchronization
import Testing

@testable import Resumable

/// Small download helpers for the tests against real peers (nginx, python3 -m http.server).
enum PeerDownloads {
    /// Deterministic content (SplitMix64), different for each seed. `Data`, so that a failed comparison
    /// prints a size, not megabytes of numbers.
    static func bytes(count: Int, seed: UInt64) -> Data {
        var state = seed
        var data = Data(count: count)
        data.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) in
            var offset = 0
            while offset < count {
                state &+= 0x9E37_79B9_7F4A_7C15
                var mixed = state
                mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
                mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
                mixed ^= mixed >> 31
                if count - offset >= 8 {
                    buffer.storeBytes(of: mixed.littleEndian, toByteOffset: offset, as: UInt64.self)
                } else {
                    for index in offset..<count {
                        buffer[index] = UInt8(truncatingIfNeeded: mixed >> UInt64(8 * (index - offset)))
                    }
                }
                offset += 8
            }
        }
        return data
    }

    /// The transports every peer test runs with, as a test argument.
    static let transports: [DownloadTask.Transport] = [.urlSession, .libcurl]

    /// No retries, so every request the server sees is one the test expects; progress every 5 ms, so a pause
    /// can come early; a long idle timeout, as nginx holds the first request of a test (see ``NginxPeerTests``)
    /// for as long as a busy machine keeps the test from pausing it.
    static func configuration(_ transport: DownloadTask.Transport) -> DownloadTask.Configuration {
        DownloadTask.Configuration(
            retry: .none, idleTimeout: .seconds(600), progressInterval: .milliseconds(5), transport: transport)
    }

    /// Waits until the download's temporary file in `directory` holds at least `bytes`, then pauses with the
    /// library's own ``DownloadTask/cancelProducingResumeData()`` and returns the token.
    ///
    /// It watches the file, not the progress events: those come only while bytes arrive, and a peer that holds
    /// the body (as the tests' nginx does after its first 64 KiB) sends none for a long time.
    static func pause(_ task: DownloadTask, atLeast bytes: Int64, in directory: TemporaryDirectory) async throws
        -> ResumeToken
    {
        try await waitForBytesOnDisk(bytes, in: directory)
        guard let token = await task.cancelProducingResumeData() else {
            let outcome = await task.result
            throw PeerError(description: "the download ended before \(bytes) bytes, so it could not pause: \(outcome)")
        }
        return token
    }

    /// Waits (up to ``Waiting/deadline``) until a temporary file of the library in `directory` holds at least
    /// `bytes`.
    static func waitForBytesOnDisk(_ bytes: Int64, in directory: TemporaryDirectory) async throws {
        let written = try await waitUntil {
            temporaryFiles(in: directory).contains { name in
                let path = directory.url.appendingPathComponent(name).path
                let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value
                return (size ?? 0) >= bytes
            }
        }
        try #require(written, "no temporary file in \(directory.path) reached \(bytes) bytes")
    }

    /// The token after a trip through a JSON file, as another process would read it.
    static func handOff(_ token: ResumeToken, through directory: TemporaryDirectory) throws -> ResumeToken {
        let file = directory.url.appendingPathComponent("handed-off-\(UUID().uuidString).json")
        try token.write(to: file)
        let decoded = try ResumeToken(contentsOf: file)
        try FileManager.default.removeItem(at: file)
        #expect(decoded == token, "the token survives its JSON form")
        return decoded
    }

    /// The token with another offset, for situations a test makes by hand.
    static func token(_ token: ResumeToken, withOffset offset: Int64) throws -> ResumeToken {
        var object = try #require(JSONSerialization.jsonObject(with: token.jsonData()) as? [String: Any])
        object["offset"] = offset
        return try ResumeToken(jsonData: JSONSerialization.data(withJSONObject: object))
    }

    /// Appends `bytes` to the temporary file `token` names.
    static func append(_ bytes: Data, toTemporaryFileOf token: ResumeToken) throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: token.tempPath))
        try handle.seekToEnd()
        try handle.write(contentsOf: bytes)
        try handle.close()
    }

    /// Collects every event of `task` from now until it ends.
    static func events(of task: DownloadTask) -> Task<[DownloadEvent], Never> {
        let stream = task.events
        return Task {
            var events: [DownloadEvent] = []
            for await event in stream { events.append(event) }
            return events
        }
    }

    /// The error `task` failed with and how many retries it announced; throws when it succeeded.
    static func failure(of task: DownloadTask) async throws -> (ResumableError, retries: Int) {
        let events = events(of: task)
        let result = await task.result
        let retries = await events.value.filter { event in
            if case .retrying = event { return true }
            return false
        }.count
        switch result {
        case .success(let success):
            throw PeerError(description: "the download succeeded although it should not have: \(success)")
        case .failure(let error):
            return (error, retries)
        }
    }

    /// The reasons of the `.restarted` events among `events`.
    static func restarts(_ events: [DownloadEvent]) -> [String] {
        events.compactMap { event in
            if case .restarted(let reason) = event { return reason }
            return nil
        }
    }

    /// The bytes of a file.
    static func contents(of url: URL) throws -> Data {
        try Data(contentsOf: url)
    }

    /// The library's temporary files left in `directory`.
    static func temporaryFiles(in directory: TemporaryDirectory) -> [String] {
        directory.contents().filter { TemporaryFileName.isValid($0) }
    }
}

/// One of the library's transports with a watcher in front: it records what each request asked and each
/// answer's status, and can cut the first response after some body bytes, as a lost connection would (the
/// server is not told). For peers whose logs do not show request headers.
final class PeerWatchingTransport: HTTPTransport {
    /// One request and its answer.
    struct Exchange: Sendable {
        /// The request's headers, by lowercased name.
        var headers: [String: String]
        /// The answer's status, once its head arrived.
        var status: Int?
        /// Body bytes passed on to the library.
        var bodyBytes: Int64 = 0
    }

    private struct State {
        var exchanges: [Exchange] = []
        var cutAfter: Int64?
    }

    private let base: DownloadTask.Transport
    private let state: Mutex<State>

    /// A watcher in front of `base` that cuts the first response after `bytes` body bytes, or never.
    init(_ base: DownloadTask.Transport, cuttingAfter bytes: Int64? = nil) {
        self.base = base
        state = Mutex(State(cutAfter: bytes))
    }

    /// The watcher as a configuration's transport.
    var transport: DownloadTask.Transport { .custom(self) }

    /// The requests so far and their answers.
    var exchanges: [Exchange] { state.withLock { $0.exchanges } }

    func execute(_ request: TransportRequest, consumer: some ResponseConsumer) async throws(ResumableError) {
        let (index, cut) = state.withLock { state in
            var headers: [String: String] = [:]
            for header in request.headers { headers[header.name.lowercased()] = header.value }
            state.exchanges.append(Exchange(headers: headers))
            defer { state.cutAfter = nil }
            return (state.exchanges.count - 1, state.cutAfter)
        }
        try await base.execute(request, consumer: Watcher(consumer: consumer, transport: self, index: index, cut: cut))
    }

    private struct Watcher<Consumer: ResponseConsumer>: ResponseConsumer {
        let consumer: Consumer
        let transport: PeerWatchingTransport
        let index: Int
        let cut: Int64?

        func receive(_ head: ResponseHead) -> Bool {
            transport.state.withLock { $0.exchanges[index].status = head.status }
            return consumer.receive(head)
        }

        func receive(_ body: UnsafeRawBufferPointer) throws(ResumableError) {
            let before = transport.state.withLock { $0.exchanges[index].bodyBytes }
            let allowed = cut.map { Int(max(0, min(Int64(body.count), $0 - before))) } ?? body.count
            if allowed > 0 {
                try consumer.receive(UnsafeRawBufferPointer(rebasing: body[0..<allowed]))
                transport.state.withLock { $0.exchanges[index].bodyBytes += Int64(allowed) }
            }
            if allowed < body.count {
                throw ResumableError(.network, "the test cut the connection after \(cut ?? 0) body bytes")
            }
        }
    }
}
