import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `--connections` through the real binary: several connections, usage errors, a kill -9 in the middle of a
/// multi-connection download resumed by another process, and the JSON events.
///
/// The CLI keeps the library's minimum segment of 1 MiB, so these tests serve 16 MiB: with `--connections 4` the
/// first response covers the first 4 MiB and the other segments start at 4, 8 and 12 MiB (the schedule splits
/// evenly), which is where the tests hold them.
@Suite("get and resume with --connections")
struct SegmentedCLITests {
    static let length: Int64 = 16 << 20
    static let quarter = length / 4
    static let segmentStarts = (1..<4).map { Int64($0) * quarter }

    /// Holds the first response and the three other segments of a `--connections 4` download after `bytes` bytes,
    /// all at one gate; any later request for the file too (a segment a loaded machine starved for the stall timeout
    /// is asked again on a fresh connection, and that answer must not run past the gate to the file's end), until the
    /// gate opens.
    static func holdFourSegments(of served: ServedFile, after bytes: Int64) -> BodyGate {
        let gate = BodyGate(holdingAfter: bytes)
        served.setBehavior(Behavior(gate: gate))
        served.server.enqueue(behavior: Behavior(gate: gate), for: served.path)
        for start in segmentStarts {
            served.server.enqueue(behavior: Behavior(gate: gate), for: served.path, whenRangeStartsAt: start)
        }
        return gate
    }

    @Test("get --connections 4 fetches four segments and saves the exact file")
    func fourConnections() async throws {
        let served = try ServedFile(length: Self.length)
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(
            ["get", served.url, "--connections", "4", "--quiet"], in: scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
        #expect(scratch.contents() == ["file.bin"], "no token, no partial file left")
        let ranges = served.ranges
        #expect(ranges.first == .some(nil), "the first request is a plain GET")
        for start in Self.segmentStarts {
            #expect(ranges.contains("bytes=\(start)-\(start + Self.quarter - 1)"), "\(ranges)")
        }
        let etag = served.server.resource(at: served.path)?.etag
        for request in served.server.requests(for: served.path).dropFirst() {
            #expect(request.ifRange == etag)
        }
    }

    @Test(
        "--connections takes 1 to 16 or 'auto'; anything else is a usage error (exit 64) before any request",
        arguments: ["0", "17", "x", "-1", "", "4.5"])
    func invalidCount(value: String) async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        let get = try await CLIProcess.run(["get", served.url, "--connections", value], in: scratch.url)
        #expect(get.exitCode == 64, "\(get)")
        #expect(get.stderr.contains("--connections"), "\(get.stderr)")
        let resume = try await CLIProcess.run(
            ["resume", scratch.file("missing.json").path, "--connections", value], in: scratch.url)
        #expect(resume.exitCode == 64, "\(resume)")
        #expect(served.server.requests(for: served.path).isEmpty)
        #expect(scratch.contents().isEmpty)
    }

    @Test("--connections 16, 1 and auto are accepted", arguments: ["16", "1", "auto", "AUTO"])
    func validCount(value: String) async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        let result = try await CLIProcess.run(["get", served.url, "--connections", value, "-q"], in: scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)
    }

    @Test("kill -9 while four segments are held, then resume --connections 2 in another process: the exact file")
    func killAndResume() async throws {
        let served = try ServedFile(length: Self.length)
        let scratch = try ScratchDirectory()
        let tokenURL = scratch.file("file.bin.resumable.json")
        let gate = Self.holdFourSegments(of: served, after: 64 << 10)
        defer { gate.open() }
        let process = try await CLIProcess.start(
            ["get", served.url, "--connections", "4", "--timeout", "3600", "--quiet"], in: scratch.url)
        #expect(await gate.waitUntilHeld(count: 4, timeout: CLIProcess.deadline), "\(gate) \(process.stderrSoFar)")
        // Checkpoints (every second) come while bytes arrive: let the four responses go on in small steps until the
        // token on disk lists the three other segments beyond its offset. No response reaches its segment's end.
        let listed = try await trickle(gate, bodyLength: Self.quarter) {
            ((try? ResumeToken(contentsOf: tokenURL))?.completedRanges.count ?? 0) >= 3
        }
        #expect(listed, "\(gate) \(process.stderrSoFar)")
        process.send(SIGKILL)
        let killed = try await process.finish()
        #expect(killed.signal == SIGKILL, "\(killed)")
        gate.open()

        let token = try ResumeToken(contentsOf: tokenURL)
        #expect(token.version == 2)
        let present = (token.offset > 0 ? [0..<token.offset] : []) + token.completedRanges
        let expected = served.bytes
        for range in present {
            let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: token.tempPath))
            try handle.seek(toOffset: UInt64(range.lowerBound))
            let bytes = try handle.read(upToCount: range.count) ?? Data()
            try handle.close()
            expectSameBytes(bytes, expected[Int(range.lowerBound)..<Int(range.upperBound)], "\(range)")
        }
        served.server.clearRequests()
        let resumed = try await CLIProcess.run(
            ["resume", tokenURL.path, "--connections", "2", "--quiet"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), expected)
        #expect(scratch.contents() == ["file.bin"], "no token, no partial file left")
        let firstRange = try #require(token.completedRanges.first)
        #expect(served.ranges.first == "bytes=\(token.offset)-\(firstRange.lowerBound - 1)")
        for request in served.server.requests(for: served.path) {
            let asked = try #require(request.closedByteRange ?? request.rangeStart.map { $0...(Self.length - 1) })
            let range = asked.lowerBound..<(asked.upperBound + 1)
            #expect(!present.contains { $0.overlaps(range) }, "\(range) asks again for bytes the token had")
            #expect(request.ifRange == token.etag)
        }
    }

    @Test("--json reports each segment and counts the connections in progress events")
    func jsonEvents() async throws {
        let served = try ServedFile(length: Self.length)
        let scratch = try ScratchDirectory()
        let gate = Self.holdFourSegments(of: served, after: 64 << 10)
        defer { gate.open() }
        let process = try await CLIProcess.start(
            ["get", served.url, "--connections", "4", "--json", "--timeout", "3600"], in: scratch.url)
        #expect(await gate.waitUntilHeld(count: 4, timeout: CLIProcess.deadline), "\(gate) \(process.stderrSoFar)")
        // Progress is reported while bytes arrive: let them go on in small steps until a line counts the connections.
        let reported = try await trickle(gate, bodyLength: Self.quarter) {
            Self.events(in: process.stderrSoFar).contains {
                $0["event"] as? String == "progress" && ($0["connections"] as? Int ?? 0) > 1
            }
        }
        #expect(reported, "\(process.stderrSoFar)")
        gate.open()
        let result = try await process.finish()
        #expect(result.exitCode == 0, "\(result)")
        try expectSameBytes(Data(contentsOf: scratch.file("file.bin")), served.bytes)

        let events = Self.events(in: result.stderr)
        // The first three are the split; a later one took over part of a segment that was still going (the gate let
        // them all go at once, but they need not end together).
        let segments = events.filter { $0["event"] as? String == "segment" }
        let split = segments.prefix(3)
        #expect(split.compactMap { $0["start"] as? Int }.map(Int64.init) == Self.segmentStarts, "\(segments)")
        #expect(split.compactMap { $0["end"] as? Int }.map(Int64.init) == Self.segmentStarts.map { $0 + Self.quarter })
        #expect(segments.compactMap { $0["connection"] as? Int } == Array(1...segments.count))
        let progress = events.filter { $0["event"] as? String == "progress" }
        #expect(!progress.isEmpty)
        #expect(progress.allSatisfy { $0["connections"] is Int }, "every progress event has 'connections'")
        // Nothing failed, except that a connection starved for the stall timeout on a loaded machine (the writes of
        // a whole test suite going to one disk) is a stall, asked again on a fresh connection: that is the rule
        // working, not a failure of this run.
        let failed = events.filter {
            $0["event"] as? String == "segment-failed"
                && ($0["error"] as? [String: Any])?["code"] as? String != "timedOut"
        }
        #expect(failed.isEmpty, "\(failed)")
        let final = try jsonObject(result.stdout)
        #expect(final["status"] as? String == "completed")
    }

    /// The JSON objects among the lines of `text`.
    static func events(in text: String) -> [[String: Any]] {
        text.split(separator: "\n").compactMap { try? jsonObject(String($0)) }
    }
}
