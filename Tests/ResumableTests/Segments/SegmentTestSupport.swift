import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Shared set-up for the end-to-end tests of multi-connection downloads (`Segments/*Tests.swift`).
///
/// The split points of `.fixed(n)` are deterministic (``SegmentSchedule``'s `takeWork`): the first response covers
/// `[0, total)` and keeps `total / n`; the rest is shared evenly, so for `total` a multiple of `n` the segments start
/// at `k * total / n`. Tests hold chosen segments at a ``BodyGate`` keyed by those starts.
enum Segmented {
    /// 8 MiB: four segments of 2 MiB with `.fixed(4)`.
    static let total: Int64 = 8 << 20
    /// The smallest segment in these tests: small enough that an 8 MiB file splits into many.
    static let minimumSegment: Int64 = 256 << 10
    static let path = "/file.bin"

    /// Where segment `index` of `count` even segments of `total` starts.
    static func start(_ index: Int, of count: Int, total: Int64 = total) -> Int64 {
        Int64(index) * (total / Int64(count))
    }

    /// The fixture's configuration with `connections` and a small minimum segment. The stall timeout is as long as
    /// the fixture's idle timeout unless given: a test that holds segments at a gate while a busy machine keeps it
    /// waiting must not see them stopped as stalled.
    static func configuration(
        _ connections: DownloadTask.Connections, stallTimeout: Duration = .seconds(600), retries: Int = 3,
        events: EventLog? = nil
    ) -> DownloadTask.Configuration {
        var configuration = DownloadFixture.configuration(retries: retries)
        configuration.connections = connections
        configuration.minimumSegmentLength = minimumSegment
        configuration.segmentStallTimeout = stallTimeout
        if let events {
            configuration.eventHandler = { event in events.append(event) }
        }
        return configuration
    }
}

/// Every event of a download, in order, as its ``DownloadTask/Configuration/eventHandler`` saw them.
final class EventLog: Sendable {
    private let events = Mutex<[DownloadEvent]>([])

    func append(_ event: DownloadEvent) {
        events.withLock { $0.append(event) }
    }

    var all: [DownloadEvent] { events.withLock { $0 } }

    /// The ranges of the `segmentStarted` events.
    var segmentsStarted: [(connection: Int, range: Range<Int64>)] {
        all.compactMap { event in
            if case .segmentStarted(let connection, let range) = event { return (connection, range) }
            return nil
        }
    }

    /// The `segmentFailed` events.
    var segmentsFailed: [(connection: Int, remaining: Range<Int64>, error: ResumableError)] {
        all.compactMap { event in
            if case .segmentFailed(let connection, let remaining, let error) = event {
                return (connection, remaining, error)
            }
            return nil
        }
    }

    /// The reasons of the `restarted` events.
    var restarts: [String] {
        all.compactMap { event in
            if case .restarted(let reason) = event { return reason }
            return nil
        }
    }

    /// The `connections` of every progress event.
    var progressConnections: [Int] {
        all.compactMap { event in
            if case .progress(let progress) = event { return progress.connections }
            return nil
        }
    }
}

/// Reads `range` of the file at `path` (fewer bytes when the file is shorter).
///
/// `Data`, not `[UInt8]`: comparing two `Data` is a `memcmp`, while comparing arrays of megabytes element by element
/// in a debug build keeps a thread of the cooperative pool busy long enough to starve the downloads running in
/// parallel tests.
func readBytes(of path: String, in range: Range<Int64>) throws -> Data {
    let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
    defer { try? handle.close() }
    try handle.seek(toOffset: UInt64(range.lowerBound))
    return try handle.read(upToCount: Int(range.upperBound - range.lowerBound)) ?? Data()
}

/// The server's bytes of the generated resource `seed` in `range`.
func serverBytes(seed: UInt64, in range: Range<Int64>) -> Data {
    Data(Resource.generatedBytes(seed: seed, range: range))
}

/// The byte range a recorded request asks for, as a half-open range; an open `first-` range runs to `total`.
func askedRange(_ request: RecordedRequest, total: Int64) -> Range<Int64>? {
    if let closed = request.closedByteRange { return closed.lowerBound..<(closed.upperBound + 1) }
    if let start = request.rangeStart { return start..<total }
    return nil
}

/// Whether `ranges` together hold every byte of `whole`.
func rangesCover(_ ranges: [Range<Int64>], _ whole: Range<Int64>) -> Bool {
    ByteRangeSet(ranges).contains(whole)
}

extension DownloadFixture {
    /// After a phase ended: waits until `count` answers of the next phase are held at `gate` (at most ``Waiting/deadline``), lets them
    /// go, and checks the finished file (`total` generated bytes of `seed`). Returns whether `count` were held, and
    /// how many were.
    func nextPhaseHolds(
        _ count: Int, at gate: BodyGate, task: DownloadTask, total: Int64, seed: UInt64
    ) async throws -> (reached: Bool, held: Int) {
        let reached = await gate.waitUntilHeld(count: count, timeout: Waiting.deadline)
        let held = gate.heldCount
        gate.open()
        let result = try await task.value
        #expect(try file(result.fileURL, holds: total, seed: seed))
        return (reached, held)
    }

    /// Serves ``Segmented/total`` generated bytes and holds the answer to the range that starts at `start` after
    /// `sent` bytes (then, once let go, cuts it after `dropAfter` bytes when given); returns the gate.
    func serveHoldingSegment(
        seed: UInt64, at start: Int64, after sent: Int64, dropAfter: Int64? = nil
    ) -> BodyGate {
        serve(.generated(length: Segmented.total, seed: seed))
        let gate = BodyGate(holdingAfter: sent)
        server.enqueue(
            behavior: Behavior(dropAfterBytes: dropAfter, gate: gate), for: Segmented.path, whenRangeStartsAt: start)
        return gate
    }

    /// Whether the file at `url` is exactly the generated resource `seed` of `length` bytes.
    func file(_ url: URL, holds length: Int64, seed: UInt64) throws -> Bool {
        try Data(contentsOf: url) == serverBytes(seed: seed, in: 0..<length)
    }

    /// The path of the one temporary file in the scratch directory.
    func onlyTemporaryFile() throws -> String {
        let files = temporaryFiles()
        try #require(files.count == 1, "expected one temporary file: \(files)")
        return directory.url.appendingPathComponent(files[0]).path
    }

    /// Whether the one temporary file holds `expected` everywhere but in `hole`: the download wrote every byte
    /// outside it. For polling: `false` rather than an issue when there is no such file (yet).
    func temporaryFileHolds(_ expected: [UInt8], except hole: Range<Int64>) -> Bool {
        let files = temporaryFiles()
        guard files.count == 1,
            let data = try? Data(contentsOf: directory.url.appendingPathComponent(files[0])),
            data.count >= expected.count
        else { return false }
        let (start, end) = (Int(hole.lowerBound), Int(hole.upperBound))
        return data.withUnsafeBytes { file in
            expected.withUnsafeBytes { wanted in
                memcmp(file.baseAddress!, wanted.baseAddress!, start) == 0
                    && memcmp(file.baseAddress! + end, wanted.baseAddress! + end, expected.count - end) == 0
            }
        }
    }

    /// Waits until the temporary file holds the server's bytes (of resource `seed`) at every one of `ranges`: the
    /// download has written them. The file is preallocated with zeros, which the generated content in a range of
    /// a few kilobytes never is.
    func waitUntilTemporaryFileHolds(_ ranges: [Range<Int64>], seed: UInt64) async throws {
        let written = try await waitUntil {
            guard let path = try? onlyTemporaryFile() else { return false }
            return ranges.allSatisfy { range in
                (try? readBytes(of: path, in: range)) == serverBytes(seed: seed, in: range)
            }
        }
        try #require(written, "the temporary file never held \(ranges)")
    }

    /// The requests that asked for a range (every one but a fresh download's first).
    func rangeRequests(_ path: String = Segmented.path) -> [RecordedRequest] {
        server.requests(for: path).filter { $0.range != nil }
    }
}

extension ResumeToken {
    /// The bytes the token says are in its file: the prefix and the completed ranges.
    var presentRanges: [Range<Int64>] {
        (offset > 0 ? [0..<offset] : []) + completedRanges
    }
}

extension ResumeToken {
    /// This token with `ranges` listed as completed (and its total `length`), after writing the server's bytes of
    /// resource `seed` for them into its temporary file: a version 2 token a resume must honour.
    func listing(_ ranges: [Range<Int64>], length: Int64, seed: UInt64) throws -> ResumeToken {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: tempPath))
        for range in ranges {
            try handle.seek(toOffset: UInt64(range.lowerBound))
            try handle.write(contentsOf: serverBytes(seed: seed, in: range))
        }
        try handle.synchronize()
        try handle.close()
        return ResumeToken(
            url: url, originalURL: originalURL, offset: offset, completedRanges: ranges, expectedLength: length,
            etag: etag, lastModified: lastModified, responseDate: responseDate, acceptRanges: acceptRanges,
            tempPath: tempPath, suggestedFilename: suggestedFilename, destination: destination, headers: headers,
            createdAt: createdAt, updatedAt: Date())
    }
}
