import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Adversarial review of issue 10 (several connections, token version 2, hashing on the fly) at 70f5edc.
@Suite("Issue 10 under attack")
struct Issue10AttackTests {
    /// A configuration with `connections`, small segments and fast retries.
    static func configuration(
        _ connections: DownloadTask.Connections, minimumSegment: Int64 = 16 * 1024, retries: Int = 3
    ) -> DownloadTask.Configuration {
        var configuration = DownloadFixture.configuration(retries: retries)
        configuration.connections = connections
        configuration.minimumSegmentLength = minimumSegment
        return configuration
    }

    /// A version 2 token made the way a multi-connection download leaves one: an interrupted download's prefix, plus
    /// the server's bytes of `range` written into the temporary file and listed in `ranges`.
    static func versionTwoToken(
        _ fixture: DownloadFixture, content: [UInt8], prefix: Int64, range: Range<Int64>
    ) async throws -> ResumeToken {
        let token = try await fixture.interruptedToken(after: prefix)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: token.tempPath))
        try handle.seek(toOffset: UInt64(range.lowerBound))
        try handle.write(contentsOf: Data(content[Int(range.lowerBound)..<Int(range.upperBound)]))
        try handle.close()
        var object = try #require(JSONSerialization.jsonObject(with: token.jsonData()) as? [String: Any])
        object["version"] = 2
        object["ranges"] = [["start": range.lowerBound, "end": range.upperBound]]
        return try ResumeToken(jsonData: JSONSerialization.data(withJSONObject: object))
    }

    // MARK: - Sanity

    @Test("Sanity: four connections download a file exactly")
    func sanity() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: 300_000, seed: 3)
        fixture.serve(.bytes(content))
        let task = try fixture.download(configuration: Self.configuration(.fixed(4)))
        let result = try await task.value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.server.requests(for: "/file.bin").count >= 4)
    }

    // MARK: - Finding: a 206 that runs past the gap throws every byte on disk away

    /// Rule broken: 2, "nothing downloaded is lost without need".
    ///
    /// Resuming a version 2 token on one connection asks only for the first gap: `Range: bytes=offset-(next-1)`.
    /// A server may answer a `206` that covers more than asked (RFC 9110 §15.3.7 lets it send other ranges; some
    /// servers ignore the last-byte-pos), here `bytes offset-(total-1)/total` under the same strong ETag.
    /// `receivePartial` (ResumeStateMachine.swift, the `last >= next.lowerBound` check) calls `restartOrFail`, which
    /// drops the prefix AND every completed range and downloads the whole file again into a new temporary file —
    /// although the answer is valid, checked by If-Range, and its bytes up to the gap's end could simply be written
    /// (as the segment path does with `.join(end:)`/`placement`, which stops at the connection's end).
    @Test("A 206 longer than the gap asked for does not throw the bytes on disk away")
    func overlongGapAnswerRestarts() async throws {
        let fixture = try DownloadFixture()
        let length = 200_000
        let content = testBytes(count: length, seed: 7)
        fixture.serve(.bytes(content))
        let token = try await Self.versionTwoToken(fixture, content: content, prefix: 50_000, range: 120_000..<200_000)
        #expect(token.version == 2)
        let etag = try #require(token.etag)
        // The answer to `bytes=50000-119999`: the whole rest, honestly labelled, same ETag.
        fixture.server.enqueue(
            ScriptedResponse(
                status: 206,
                headers: [
                    HeaderField("ETag", etag), HeaderField("Content-Range", "bytes 50000-\(length - 1)/\(length)"),
                    HeaderField("Content-Length", "\(length - 50_000)"),
                ],
                body: Array(content[50_000...])),
            for: "/file.bin")
        let result = try await fixture.resumeThroughDisk(token, configuration: Self.configuration(.single)).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        let ranges = fixture.ranges().dropFirst()  // the first request made the interrupted token
        #expect(ranges.first == "bytes=50000-119999")
        #expect(!result.restarted, "130 000 bytes on disk were dropped and downloaded again: \(Array(ranges))")
        #expect(!ranges.contains(nil), "a request without Range re-downloaded everything: \(Array(ranges))")
    }

    // MARK: - Finding: after a restart inside the segmented phase, the old bytes come back without validators

    /// Rules broken: 3 (a token the library itself hands out and writes as a checkpoint is refused when read back)
    /// and the invariant "a token describes bytes of the version its validators name".
    ///
    /// When a segment's answer shows the file changed, `transfer()` ends the phase with
    /// `machine.segmentsEnded(.restart, present:)`, which drops the bytes (offset 0, no ranges, no validators, no
    /// length). But after the loop, `transfer()` (DownloadEngine+Segments.swift, the `segmentsProgressed` call
    /// after `continuation.finish()`) writes the schedule's `present` back into the machine, because `state.segments`
    /// is still set: the machine again claims the OLD version's prefix and completed ranges, now with no validators
    /// and no expectedLength. Normally `nextRequest()` drops them once more (no validator), but every path that
    /// makes a token before that — a token write that fails while switching to the new file (`switchFile` restores
    /// that state), a pause or deadline landing in that window — hands out a version 2 token with ranges and
    /// neither a validator nor an expectedLength: `conclude` writes it through the checkpoint handler (replacing
    /// the good checkpoint) and attaches it to the error, and `ResumeToken(jsonData:)` refuses it ("expectedLength
    /// is required with ranges"). The single-connection path in the same situation leaves no token at all.
    ///
    /// Reproduction: three connections (probe 0..<100000, segments at 100000 and 200000). The probe is held after
    /// 1000 bytes; the segment at 100000 completes; the file is replaced before the stolen half of the third segment
    /// (250000..<300000) is asked for, whose 200 carries the new ETag; the checkpoint that switches to the new
    /// temporary file fails (a full disk where the token lives).
    @Test("A restart inside the segmented phase never leaves a token the library cannot read back")
    func restartResurrectsOldRangesWithoutValidators() async throws {
        let fixture = try DownloadFixture()
        let length = 300_000
        let old = testBytes(count: length, seed: 21)
        fixture.serve(.bytes(old))
        let probeGate = BodyGate(holdingAfter: 1000)
        let segmentGate = BodyGate(holdingAfter: 0)
        let thirdGate = BodyGate(holdingAfter: 0)
        fixture.server.enqueue(behavior: Behavior(gate: probeGate), for: "/file.bin")
        fixture.server.enqueue(behavior: Behavior(gate: segmentGate), for: "/file.bin", whenRangeStartsAt: 100_000)
        fixture.server.enqueue(behavior: Behavior(gate: thirdGate), for: "/file.bin", whenRangeStartsAt: 200_000)

        let firstPath = Mutex<String?>(nil)
        let recorded = Mutex<[ResumeToken]>([])
        var configuration = Self.configuration(.fixed(3))
        configuration.checkpointing = DownloadTask.Checkpointing(interval: .seconds(100_000)) { token in
            let first = firstPath.withLock { path in
                if path == nil { path = token.tempPath }
                return path
            }
            guard token.tempPath == first else {
                throw ResumableError(.fileSystem, "no space left on device (simulated, writing the token)")
            }
            recorded.withLock { $0.append(token) }
        }
        let task = try fixture.download(configuration: configuration)
        #expect(await probeGate.waitUntilHeld())
        #expect(await segmentGate.waitUntilHeld())
        #expect(await thirdGate.waitUntilHeld())
        // The file changes on the server; the responses already under way keep the old version.
        fixture.serve(.bytes(testBytes(count: length, seed: 22)))
        segmentGate.open()

        let error = try #require(await failure(of: task))
        probeGate.open()
        thirdGate.open()
        #expect(error.message.contains("no space left"), "\(error)")
        if let token = error.resumeToken {
            #expect(
                token.etag != nil || token.lastModified != nil || token.offset == 0,
                "a token over \(token.offset) bytes and ranges \(token.completedRanges) names no validator")
            #expect(throws: Never.self, "the library's own token must decode") {
                _ = try ResumeToken(jsonData: token.jsonData())
            }
        }
        // The checkpoint the handler last accepted must decode too.
        if let last = recorded.withLock({ $0.last }) {
            #expect(throws: Never.self, "the last checkpoint written must decode") {
                _ = try ResumeToken(jsonData: last.jsonData())
            }
        }
    }

    // MARK: - Finding: a failed write that fills a gap forgets the completed range after it

    /// Rule broken: 2, "nothing downloaded is lost without need".
    ///
    /// On one connection, a version 2 token's gaps are filled in order. `ResumeStateMachine.receiveBody(count:)`
    /// advances the offset and, when the chunk reaches the next completed range, calls `absorbCompletedRanges()`,
    /// which moves that range into the prefix — BEFORE the engine writes the chunk. When the write then fails
    /// (`DownloadEngine+Receiving.swift`, single path: `state.machine.revertBody(to: position)`), `revertBody` only
    /// lowers the offset back to the chunk's start: the absorbed range is no longer in `completedRanges`, so the
    /// token the failure carries (and the truncation to `trustedLength` before the next request) forgets bytes that
    /// are on disk. Here: a full disk while the last 4 KiB gap before a 66 752-byte completed range is written.
    @Test("A write that fails while filling a gap keeps the completed range after the gap in the token")
    func failedGapWriteForgetsCompletedRange() async throws {
        guard let disk = try await SmallFileSystem.mount(kilobytes: 1024) else {
            print("⚠️ cannot mount a small tmpfs (needs root): failedGapWriteForgetsCompletedRange did not run")
            return
        }
        let server = try LoopbackServer()
        let length = 120_000
        let content = testBytes(count: length, seed: 31)
        server.register(.bytes(content), at: "/file.bin")
        server.enqueue(behavior: Behavior(dropAfterBytes: 49_152), for: "/file.bin")
        let first = try DownloadTask(
            url: server.url(for: "/file.bin"), destination: .directory(disk.directory.url),
            configuration: DownloadFixture.configuration(retries: 0))
        let interrupted = try #require(await failure(of: first)?.resumeToken)
        #expect(interrupted.offset == 49_152)
        // The server's bytes 53248..<120000 are on disk too, as a multi-connection download leaves them; the page
        // 49152..<53248 is a hole.
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: interrupted.tempPath))
        try handle.seek(toOffset: 53_248)
        try handle.write(contentsOf: Data(content[53_248...]))
        try handle.synchronize()
        try handle.close()
        var object = try #require(JSONSerialization.jsonObject(with: interrupted.jsonData()) as? [String: Any])
        object["version"] = 2
        object["ranges"] = [["start": 53_248, "end": length]]
        let token = try ResumeToken(jsonData: JSONSerialization.data(withJSONObject: object))
        // The disk fills up.
        let filler = disk.directory.url.appendingPathComponent("filler")
        _ = FileManager.default.createFile(atPath: filler.path, contents: nil)
        let fill = try FileHandle(forWritingTo: filler)
        let page = Data(repeating: 0xAB, count: 4096)
        while (try? fill.write(contentsOf: page)) != nil {}
        try? fill.close()

        var configuration = DownloadFixture.configuration(retries: 0)
        configuration.connections = .single
        let resumed = try DownloadTask.resume(from: token, configuration: configuration)
        let error = try #require(await failure(of: resumed))
        #expect(server.requests(for: "/file.bin").last?.header("Range") == "bytes=49152-53247")
        let after = try #require(error.resumeToken, "\(error)")
        #expect(
            after.completedRanges == [53_248..<120_000] || after.offset >= 53_248,
            "the token forgot the 66 752 bytes at 53248..<120000: offset \(after.offset), ranges \(after.completedRanges)"
        )
    }
}
