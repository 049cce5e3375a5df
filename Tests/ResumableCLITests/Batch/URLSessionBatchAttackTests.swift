import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review of the batch CLI on the URLSession transport: interrupts (SIGINT, SIGKILL) mid-batch, resumed
/// with the other transport and back, `list --state` while it runs, and a file that changes in between.
@Suite("Batch attack on the URLSession transport: interrupts, kills, switching transports")
struct URLSessionBatchAttackTests {
    /// The names of finished files in `directory` (no temporary files).
    static func finished(in directory: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).filter { !$0.hasPrefix(".") }
    }

    /// A batch of 30 files (each paced by the server) run with `--transport urlsession -j 8 --limit-rate`: SIGINT
    /// once a few files are done, `resume --state` with libcurl killed with SIGKILL, `resume` with URLSession killed
    /// again, then a last `resume` to the end. One file changes on the server in between. `list --state` runs while
    /// each batch does. Every file ends exactly as the server has it, nothing else is in the output, and the store
    /// ends empty.
    @Test("SIGINT, then two SIGKILLs across transports, then resume: every file exact, the store empty")
    func interruptsAcrossTransports() async throws {
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        var contents: [[UInt8]] = []
        var list = ""
        // The last ten files are held until the final resume, so that no batch before it can finish before its
        // signal arrives, however fast or slow the machine.
        let held = BodyGate(holdingAfter: 10_000)
        for index in 0..<30 {
            let bytes = Resource.generatedBytes(seed: 900 + UInt64(index), range: 0..<Int64(150_000 + index * 7_001))
            var behavior = Behavior()
            behavior.throttleBytesPerSecond = 300_000
            if index >= 20 { behavior.gate = held }
            server.register(.bytes(bytes, behavior: behavior), at: "/b\(index).bin")
            contents.append(bytes)
            list += server.url(for: "/b\(index).bin").absoluteString + "\n"
        }
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let out = scratch.url.appendingPathComponent("out")

        func runUntil(
            _ arguments: [String], files: Int, signal: Int32
        ) async throws -> (CLIResult, CLIResult?) {
            let process = try await CLIProcess.start(arguments, in: scratch.url)
            let reached = try await eventually(timeout: .seconds(60)) { Self.finished(in: out).count >= files }
            var listed: CLIResult?
            if reached {
                listed = try await CLIProcess.run(["list", "--state", "state"], in: scratch.url, timeout: .seconds(30))
            }
            process.send(signal)
            return (try await process.finish(), listed)
        }

        let (interrupted, listed) = try await runUntil(
            [
                "get", "-i", "list.txt", "-j", "8", "-o", "out/", "--state", "state", "--transport", "urlsession",
                "--limit-rate", "2M", "-q",
            ], files: 4, signal: SIGINT)
        #expect(interrupted.exitCode == 130, "\(interrupted)")
        #expect(listed?.exitCode == 0, "list while running: \(String(describing: listed))")

        // A file that had not finished changes on the server.
        let pending = (0..<30).filter { !Self.finished(in: out).contains("b\($0).bin") }
        if let changed = pending.last {
            let bytes = Resource.generatedBytes(seed: 7_777, range: 0..<123_457)
            server.register(.bytes(bytes), at: "/b\(changed).bin")
            contents[changed] = bytes
        }

        let done = Self.finished(in: out).count
        let (killed, _) = try await runUntil(
            ["resume", "--state", "state", "--transport", "libcurl", "-q"], files: min(done + 4, 20), signal: SIGKILL)
        #expect(killed.signal == SIGKILL, "\(killed)")
        let doneAgain = Self.finished(in: out).count
        let (killedAgain, _) = try await runUntil(
            ["resume", "--state", "state", "--transport", "urlsession", "--limit-rate", "1M", "-q"],
            files: min(doneAgain + 4, 20), signal: SIGKILL)
        #expect(killedAgain.signal == SIGKILL, "\(killedAgain)")

        held.open()
        let last = try await CLIProcess.run(
            ["resume", "--state", "state", "--transport", "urlsession"], in: scratch.url)
        #expect(last.exitCode == 0, "\(last)")
        let names = Set(Self.finished(in: out))
        #expect(names == Set((0..<30).map { "b\($0).bin" }), "\(names.sorted())")
        for (index, bytes) in contents.enumerated() {
            let data = try? Data(contentsOf: out.appendingPathComponent("b\(index).bin"))
            expectSameBytes(data, Data(bytes), "b\(index).bin: \(data?.count ?? -1) bytes, the server's \(bytes.count)")
        }
        let records = (try? FileManager.default.contentsOfDirectory(atPath: scratch.url.path + "/state/tasks")) ?? []
        #expect(records.isEmpty, "records left: \(records)")
        let partial = (try? FileManager.default.contentsOfDirectory(atPath: scratch.url.path + "/state/partial")) ?? []
        #expect(partial.isEmpty, "temporary files left: \(partial)")
    }

    /// SIGINT while every download's delivery thread waits in `--limit-rate 1k` (each 16 KiB piece waits some 16 s
    /// behind the others'): the pause ends the waits, the batch exits with 130 within seconds, and `resume` continues
    /// each file from its bytes.
    @Test("SIGINT while URLSession downloads wait in --limit-rate 1k: exits at once, resume continues from the bytes")
    func interruptWhileRateLimited() async throws {
        let server = try LoopbackServer(configuration: .init(keepAlive: true))
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        var contents: [[UInt8]] = []
        var list = ""
        for index in 0..<4 {
            let bytes = Resource.generatedBytes(seed: 950 + UInt64(index), range: 0..<300_000)
            server.register(.bytes(bytes), at: "/r\(index).bin")
            contents.append(bytes)
            list += server.url(for: "/r\(index).bin").absoluteString + "\n"
        }
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let process = try await CLIProcess.start(
            [
                "get", "-i", "list.txt", "-j", "4", "-o", "out/", "--state", "state", "--transport", "urlsession",
                "--limit-rate", "1k", "-q",
            ], in: scratch.url)
        let partial = scratch.url.appendingPathComponent("state/partial")
        let started = try await eventually(timeout: .seconds(60)) {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: partial.path)) ?? []
            return names.count == 4
                && names.allSatisfy { name in
                    let size = (try? FileManager.default.attributesOfItem(atPath: partial.path + "/" + name))?[.size]
                    return ((size as? NSNumber)?.int64Value ?? 0) > 0
                }
        }
        try #require(started, "the downloads never wrote anything")
        let clock = ContinuousClock()
        let signalled = clock.now
        process.send(SIGINT)
        let interrupted = try await process.finish(timeout: .seconds(60))
        // From the child's exit as a thread of its own saw it: a parallel run can keep this test from noticing the exit
        // for many seconds.
        let took = (process.exitedAt ?? clock.now) - signalled
        #expect(interrupted.exitCode == 130, "\(interrupted)")
        #expect(took < .seconds(10), "SIGINT took \(took) to end the batch")
        let resumed = try await CLIProcess.run(
            ["resume", "--state", "state", "--transport", "urlsession", "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        for (index, bytes) in contents.enumerated() {
            let data = try? Data(contentsOf: scratch.url.appendingPathComponent("out/r\(index).bin"))
            expectSameBytes(data, Data(bytes), "r\(index).bin")
            let ranges = server.requests(for: "/r\(index).bin").map { $0.header("Range") }
            #expect(ranges.count == 2 && ranges.last??.hasPrefix("bytes=") == true, "r\(index).bin: \(ranges)")
        }
    }
}
