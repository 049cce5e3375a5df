import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Review of the many-downloads layer (`DownloadQueue`, `TaskStore`, `get -i`, `resume --state`) through the real
/// binary. Each test fails today and names the rule it breaks.
@Suite("Batch store review")
struct BatchStoreReviewTests {
    /// Rule broken: nothing downloaded is lost without need (and a batch's state must read back).
    ///
    /// `DownloadQueue.insert` checks that a record can hold the destination (`TaskRecord.canHold`), but not the URL,
    /// and `TaskStore.write` writes a record of any size, while `TaskStore.readRecordFile` refuses one over 1 MiB. A
    /// record with a token holds the URL three times (`url`, `token.url`, `token.originalURL`). A list line whose URL
    /// carries a 400 KB fragment (never sent to the server: the request line stays short) is downloaded, and its
    /// first checkpoint or its pause writes a record of 1.2 MB that no later run can read: `resume --state` skips it
    /// ("not a regular file of at most 1 MiB") and exits 65, the bytes in `partial/` are never resumed, and the next
    /// `get -i` of the same store refuses to start because the store holds that record. The batch said "1 left to
    /// resume".
    @Test("A list URL with a 400 KB fragment: the paused download's record reads back and resume --state finishes it")
    func longURLRecordReadsBack() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let content = Resource.generatedBytes(seed: 98, range: 0..<(1 << 20))
        server.register(.bytes(content), at: "/long.bin")
        let gate = BodyGate(holdingAfter: 100_000)
        server.enqueue(behavior: Behavior(gate: gate), for: "/long.bin")
        let url = server.url(for: "/long.bin").absoluteString + "#" + String(repeating: "a", count: 400_000)
        try Data((url + "\n").utf8).write(to: scratch.file("list.txt"))
        let process = try await CLIProcess.start(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "-q"], in: scratch.url)
        #expect(await gate.waitUntilHeld(count: 1, timeout: CLIProcess.deadline), "\(gate)")
        let partial = scratch.url.appendingPathComponent("state/partial")
        let written = try await eventually {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: partial.path)) ?? []
            let sizes = names.compactMap {
                (try? FileManager.default.attributesOfItem(atPath: partial.appendingPathComponent($0).path))?[.size]
                    as? NSNumber
            }
            return sizes.count == 1 && sizes[0].int64Value == 100_000
        }
        #expect(written)
        process.send(SIGINT)
        let interrupted = try await process.finish()
        gate.open()
        #expect(interrupted.exitCode == 130, "\(interrupted)")

        let resumed = try await CLIProcess.run(["resume", "--state", "state", "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "the paused download could not be continued: \(resumed.stderr.prefix(400))")
        #expect(
            (try? Data(contentsOf: scratch.url.appendingPathComponent("out/long.bin"))) == Data(content),
            "the file was never finished")
        #expect(
            server.requests(for: "/long.bin").last?.header("Range") == "bytes=100000-",
            "the 100,000 bytes on disk were not resumed")
    }
}
