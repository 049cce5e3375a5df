import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Second review of rule 9a through the real binary, in a batch (`get -i … --state`): a restarting `200` held at its
/// head (or after its first byte), then SIGINT; the record in `state/tasks` must describe bytes really in its file,
/// and `resume --state` must end with the server's file. This passes on f213b6a (what holds).
///
/// Not kept as a test, because it is a race: the same with the head followed by one body byte before the hold
/// (`firstBytes: 1`) ended, in 2 runs of 6, with exit 130 and a record `"state":"paused"` without a token, the 40,000
/// bytes of `"v1"` removed: the SIGINT landed after the switch's stop check and before the first piece was written, the
/// window that `RestartAtFirstByteSecondReviewTests` ("FAILS on f213b6a: a pause right after the switch …") hits
/// deterministically.
@Suite("Second review: a batch paused around a restart's first byte, then resumed (rule 9a)")
struct RestartAtFirstByteSecondReviewCLITests {
    static let length = 100_000
    static let cut = 40_000

    @Test(
        "Holds: get -i --state paused by SIGINT around a restart's first byte: the record names real bytes, resume is exact",
        arguments: [0])
    func batchPausedAroundFirstByte(firstBytes: Int) async throws {
        let old = Resource.generatedBytes(seed: 9621 + UInt64(firstBytes), range: 0..<Int64(Self.length))
        let new = Resource.generatedBytes(seed: 9623 + UInt64(firstBytes), range: 0..<Int64(Self.length + 30_000))
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let server = try RawScriptServer { head, index, send in
            switch index {
            case 0:
                let sent = send(
                    RawScriptServer.head(
                        "200 OK", ["Accept-Ranges: bytes", "Content-Length: \(old.count)"],
                        etag: Array("\"v1\"".utf8)) + old[0..<Self.cut])
                return sent ? .completed(0) : .clientLeft(0)
            case 1:
                let head = RawScriptServer.head(
                    "200 OK", ["Content-Length: \(new.count)"], etag: Array("\"v2\"".utf8))
                let sent = send(head + new[0..<firstBytes])
                held.signal()
                guard sent else { return .clientLeft(0) }
                _ = release.wait(timeout: .now() + 300)
                return .completed(1)
            default:
                let whole =
                    RawScriptServer.head("200 OK", ["Content-Length: \(new.count)"], etag: Array("\"v2\"".utf8))
                    + new
                return send(whole) ? .completed(2) : .clientLeft(0)
            }
        }
        defer {
            release.signal()
            server.stop()
        }
        let scratch = try ScratchDirectory()
        try Data("http://127.0.0.1:\(server.port)/file.bin\n".utf8).write(to: scratch.file("list.txt"))
        _ = try scratch.subdirectory("out")
        let process = try await CLIProcess.start(
            [
                "get", "-i", "list.txt", "-o", "out/", "--state", "state", "-j", "4", "--retries", "3", "--timeout",
                "300",
            ],
            in: scratch.url)
        let reached = await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: held.wait(timeout: .now() + 300) == .success) }.start()
        }
        // With `firstBytes`, the switch may have run (its token, covering no byte, stays in the store's memory; the
        // byte is recorded by the pause) or not yet: either way the record must name bytes really in its file.
        process.send(SIGINT)
        let paused = try await process.finish()
        try #require(reached, "the restarting answer was never sent: \(paused)")
        #expect(paused.exitCode == 130, "\(paused)")
        let tasks = scratch.file("state").appendingPathComponent("tasks")
        let recordText = ((try? FileManager.default.contentsOfDirectory(atPath: tasks.path)) ?? []).map { name in
            (try? String(contentsOf: tasks.appendingPathComponent(name), encoding: .utf8)) ?? "?"
        }
        #expect(recordText.allSatisfy { $0.contains("\"token\"") }, "\(recordText) \(paused)")
        let token = try CrashAndHashAttackTests.onlyRecordToken(scratch.file("state"))
        let path = try #require(token["tempPath"] as? String, "\(token)")
        let offset = try #require((token["offset"] as? NSNumber)?.intValue, "\(token)")
        let version = token["etag"] as? String == "\"v2\"" ? new : old
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        #expect(offset <= bytes.count, "\(offset) of \(bytes.count)")
        let same = Array(bytes.prefix(offset)) == Array(version.prefix(offset))
        #expect(same, "the record's token does not describe its file: \(token)")
        if firstBytes == 0 { #expect(token["etag"] as? String == "\"v1\"" && offset == Self.cut, "\(token)") }
        release.signal()
        let resumed = try await CLIProcess.run(["resume", "--state", "state", "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        let finished = [UInt8](try Data(contentsOf: scratch.file("out/file.bin")))
        let exact = finished == new
        #expect(exact, "\(finished.count) bytes, not the server's file")
    }
}
