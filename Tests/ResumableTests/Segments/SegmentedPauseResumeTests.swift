import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Pausing a multi-connection download while its segments are held mid-body, and resuming the version 2 token it
/// leaves: the token lists exactly the bytes in the file, and a resume asks only for the gaps.
@Suite("Pausing and resuming a multi-connection download")
struct SegmentedPauseResumeTests {
    static let path = Segmented.path
    static let total = Segmented.total
    static let quarters = (0..<4).map { Segmented.start($0, of: 4) }
    /// How many bytes of the first response, and of the segments at 2, 4 and 6 MiB, the server sends before it holds
    /// them.
    static let sent: [Int64] = [100_000, 10_000, 20_000, 30_000]

    /// The bytes the held download wrote: a prefix, and the start of each other segment.
    static var written: [Range<Int64>] {
        zip(quarters, sent).map { start, count in start..<(start + count) }
    }

    /// Downloads resource `seed` with `.fixed(4)`, holds each of the four responses after ``sent`` bytes, waits until
    /// the temporary file holds them all, and pauses. The gates stay closed: the paused task closed its connections.
    func pausedToken(_ fixture: DownloadFixture, seed: UInt64, firstSends: Int64? = nil) async throws -> ResumeToken {
        fixture.serve(.generated(length: Self.total, seed: seed))
        let sent = [firstSends ?? Self.sent[0]] + Self.sent.dropFirst()
        let gates = sent.map { BodyGate(holdingAfter: $0) }
        fixture.server.enqueue(behavior: Behavior(gate: gates[0]), for: Self.path)
        for (start, gate) in zip(Self.quarters, gates).dropFirst() {
            fixture.server.enqueue(behavior: Behavior(gate: gate), for: Self.path, whenRangeStartsAt: start)
        }
        let task = try fixture.download(configuration: Segmented.configuration(.fixed(4)))
        for gate in gates {
            try #require(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)")
        }
        let written = zip(Self.quarters, sent).map { start, count in start..<(start + count) }.filter { !$0.isEmpty }
        try await fixture.waitUntilTemporaryFileHolds(written, seed: seed)
        return try #require(await task.cancelProducingResumeData(), "a paused download with bytes on disk has a token")
    }

    @Test(
        "The pause token is version 2; its offset and ranges are exactly the bytes in the file, which are the server's",
        arguments: TransportKind.all)
    func tokenDescribesTheFile(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let token = try await pausedToken(fixture, seed: 41)
        #expect(token.version == 2)
        #expect(token.offset == Self.sent[0])
        #expect(token.completedRanges == Array(Self.written.dropFirst()))
        #expect(token.expectedLength == Self.total)
        #expect(token.etag == fixture.server.resource(at: Self.path)?.etag)
        let decoded = try ResumeToken(jsonData: token.jsonData())
        #expect(decoded == token)
        #expect(decoded.version == 2 && decoded.completedRanges == token.completedRanges)
        for range in token.presentRanges {
            try expectSameBytes(readBytes(of: token.tempPath, in: range), serverBytes(seed: 41, in: range), "\(range)")
        }
        #expect(fixture.temporaryFiles().count == 1)
    }

    @Test(
        "Resuming a version 2 token with one connection asks only for the gaps, in order, under If-Range",
        arguments: TransportKind.all)
    func resumeWithOneConnection(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let token = try await pausedToken(fixture, seed: 42)
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token, configuration: Segmented.configuration(.single)).value

        #expect(try fixture.file(result.fileURL, holds: Self.total, seed: 42))
        #expect(!result.restarted)
        #expect(result.resumedAtOffset == token.offset)
        let present = token.presentRanges
        #expect(result.bytesTransferred == Self.total - present.reduce(0) { $0 + Int64($1.count) })
        let requests = fixture.server.requests(for: Self.path)
        let written = Self.written
        #expect(
            requests.map(\.range) == [
                "bytes=\(written[0].upperBound)-\(written[1].lowerBound - 1)",
                "bytes=\(written[1].upperBound)-\(written[2].lowerBound - 1)",
                "bytes=\(written[2].upperBound)-\(written[3].lowerBound - 1)",
                "bytes=\(written[3].upperBound)-",
            ])
        for request in requests {
            #expect(request.ifRange == token.etag)
            let asked = try #require(askedRange(request, total: Self.total))
            #expect(!present.contains { $0.overlaps(asked) }, "\(asked) asks again for bytes the token had")
        }
        #expect(fixture.temporaryFiles().isEmpty)
    }

    @Test(
        "Resuming a version 2 token with three connections splits the gaps and never asks for a byte it had",
        arguments: TransportKind.all)
    func resumeWithThreeConnections(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let token = try await pausedToken(fixture, seed: 43)
        fixture.server.clearRequests()
        let events = EventLog()
        let result = try await fixture.resumeThroughDisk(
            token, configuration: Segmented.configuration(.fixed(3), events: events)
        ).value

        #expect(try fixture.file(result.fileURL, holds: Self.total, seed: 43))
        #expect(!result.restarted)
        let requests = fixture.server.requests(for: Self.path)
        #expect(requests.first?.range == "bytes=\(token.offset)-\(Self.quarters[1] - 1)", "the first gap first")
        let present = token.presentRanges
        var asked: [Range<Int64>] = []
        for request in requests {
            #expect(request.ifRange == token.etag)
            let range = try #require(askedRange(request, total: Self.total))
            #expect(!present.contains { $0.overlaps(range) }, "\(range) asks again for bytes the token had")
            asked.append(range)
        }
        #expect(rangesCover(asked + present, 0..<Self.total))
        #expect(!events.segmentsStarted.isEmpty, "the gaps were shared among connections")
        #expect(fixture.temporaryFiles().isEmpty)
    }

    @Test(
        "A version 2 token resumed after the file changed on the server restarts from byte 0 into the new version",
        arguments: [DownloadTask.Connections.single, .fixed(3)])
    func resumeAfterChange(connections: DownloadTask.Connections) async throws {
        let fixture = try DownloadFixture()
        let token = try await pausedToken(fixture, seed: 44)
        let changedLength = Self.total - 12_345
        fixture.serve(.generated(length: changedLength, seed: 45))
        fixture.server.clearRequests()
        let events = EventLog()
        let result = try await fixture.resumeThroughDisk(
            token, configuration: Segmented.configuration(connections, events: events)
        ).value

        #expect(try fixture.file(result.fileURL, holds: changedLength, seed: 45))
        #expect(result.restarted)
        #expect(result.resumedAtOffset == 0)
        #expect(!events.restarts.isEmpty)
        #expect(fixture.server.requests(for: Self.path).first?.ifRange == token.etag)
        #expect(!FileManager.default.fileExists(atPath: token.tempPath), "the old version's file is gone")
        #expect(fixture.temporaryFiles().isEmpty)
    }

    @Test(
        "Paused before the first response sent a byte: the other segments' bytes are kept in a token, not thrown away")
    func pauseWithEmptyPrefix() async throws {
        let fixture = try DownloadFixture()
        let token = try await pausedToken(fixture, seed: 46, firstSends: 0)
        #expect(token.offset == 0)
        #expect(token.completedRanges == Array(Self.written.dropFirst()))
        for range in token.completedRanges {
            try expectSameBytes(readBytes(of: token.tempPath, in: range), serverBytes(seed: 46, in: range), "\(range)")
        }
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token, configuration: Segmented.configuration(.single)).value
        #expect(try fixture.file(result.fileURL, holds: Self.total, seed: 46))
        #expect(fixture.server.requests(for: Self.path).first?.range == "bytes=0-\(Self.quarters[1] - 1)")
    }

    /// Resuming into another directory copies the bytes beside the new destination first. A version 2 token's file is
    /// preallocated to the whole length: only the ranges the token lists are copied, not the length of the file.
    @Test(
        "Resuming a version 2 token into another directory copies only the bytes the token lists, then finishes",
        arguments: [false, true])
    func resumeIntoAnotherDirectoryCopiesOnlyListedBytes(acrossFileSystems: Bool) async throws {
        let fixture = try DownloadFixture()
        // On another file system (tmpfs beside the temporary directory's), copy_file_range refuses (EXDEV): the ranges
        // are copied by reading and writing them.
        let elsewhere = acrossFileSystems ? try TemporaryDirectory(in: "/dev/shm") : nil
        let token = try await pausedToken(fixture, seed: 47)
        let present = token.presentRanges
        // Bytes in the old file that no token claims (after the first segment's, before the second's) must not come
        // along: mark them.
        let unclaimed = (Self.written[0].upperBound + 1000)..<(Self.written[0].upperBound + 5000)
        let old = try FileHandle(forWritingTo: URL(fileURLWithPath: token.tempPath))
        try old.seek(toOffset: UInt64(unclaimed.lowerBound))
        try old.write(contentsOf: Data(repeating: 0xAB, count: unclaimed.count))
        try old.close()
        #expect(FileManager.default.fileSize(atPath: token.tempPath) == Self.total, "the old file is preallocated")

        let other = (elsewhere?.url ?? fixture.directory.url).appendingPathComponent("other")
        try FileManager.default.createDirectory(at: other, withIntermediateDirectories: true)
        if acrossFileSystems {
            func device(_ path: String) throws -> UInt64 {
                try #require(
                    (FileManager.default.attributesOfItem(atPath: path)[.systemNumber] as? NSNumber)?.uint64Value)
            }
            try #require(
                try device(other.path) != device(fixture.directory.path),
                "/dev/shm and \(fixture.directory.path) are on one file system here")
        }
        fixture.server.clearRequests()
        let gate = BodyGate(holdingAfter: 0)
        fixture.server.enqueue(behavior: Behavior(gate: gate), for: Self.path)
        let task = try DownloadTask.resume(
            from: token, destination: .directory(other), configuration: Segmented.configuration(.single))
        try #require(await gate.waitUntilHeld(timeout: Waiting.deadline))
        // Held before the first body byte: the copy holds exactly what the move wrote.
        let copies = try FileManager.default.contentsOfDirectory(atPath: other.path).filter(TemporaryFileName.isValid)
        let copy = try #require(copies.first.map { other.appendingPathComponent($0).path }, "\(copies)")
        #expect(copies.count == 1)
        #expect(FileManager.default.fileSize(atPath: copy) == present.last?.upperBound, "copied up to the last range")
        for range in present {
            try expectSameBytes(readBytes(of: copy, in: range), serverBytes(seed: 47, in: range), "\(range)")
        }
        #expect(
            try readBytes(of: copy, in: unclaimed) == Data(count: unclaimed.count), "bytes no token lists were copied")

        gate.open()
        let result = try await task.value
        #expect(try fixture.file(result.fileURL, holds: Self.total, seed: 47))
        #expect(result.fileURL.deletingLastPathComponent().standardizedFileURL.path == other.standardizedFileURL.path)
        #expect(!FileManager.default.fileExists(atPath: token.tempPath), "the old file goes when the task ends")
        #expect(fixture.temporaryFiles().isEmpty)
    }
}

extension FileManager {
    /// The size of the file at `path`, or `nil`.
    fileprivate func fileSize(atPath path: String) -> Int64? {
        (try? attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value
    }
}
