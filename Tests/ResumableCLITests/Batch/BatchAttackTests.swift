import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review of issue 11 through the real binary: crafted stores, and a SIGINT at an early instant.
@Suite("Batch attack: crafted stores and early interrupts")
struct BatchAttackTests {
    /// A store as `TaskStore` makes it (mode 0700), with the given records in `tasks/`.
    static func makeStore(_ state: URL, records: [[String: Any]]) throws {
        for directory in [state, state.appendingPathComponent("tasks"), state.appendingPathComponent("partial")] {
            try FileManager.default.createDirectory(
                at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        for record in records {
            let id = try #require(record["id"] as? String)
            try JSONSerialization.data(withJSONObject: record).write(
                to: state.appendingPathComponent("tasks/\(id).json"))
        }
    }

    static func record(url: String, destination: String, order: Int64, state: String = "queued") -> [String: Any] {
        [
            "version": 1, "id": UUID().uuidString.lowercased(), "url": url, "destination": destination,
            "priority": 0, "order": NSNumber(value: order), "state": state,
        ]
    }

    /// `TaskStore.listing` sorts with `-order`: a record whose order is `Int64.min` (valid JSON, decoded without
    /// complaint) overflows the negation and traps.
    @Test("list --state with a record of order Int64.min: a listing or a typed problem, never a trap")
    func listExtremeOrder() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.url.appendingPathComponent("state")
        try Self.makeStore(
            state,
            records: [
                Self.record(url: "http://127.0.0.1:9/a.bin", destination: scratch.url.path + "/", order: .min),
                Self.record(url: "http://127.0.0.1:9/b.bin", destination: scratch.url.path + "/", order: 0),
            ])
        let listed = try await CLIProcess.run(["list", "--state", "state"], in: scratch.url)
        #expect(listed.signal == nil, "list trapped: \(listed)")
        #expect(listed.exitCode == 0 || listed.exitCode == 65, "\(listed)")
    }

    /// `QueueSchedule.add` computes `max(nextOrder, order) + 1`: a restored record of order `Int64.max` traps
    /// `resume --state` (and `moveToFront` next to a record of order `Int64.min` traps on `first - 1`).
    @Test("resume --state with a record of order Int64.max: the file is downloaded or the record refused, no trap")
    func resumeExtremeOrder() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let content = Resource.generatedBytes(seed: 3, range: 0..<20_000)
        server.register(.bytes(content), at: "/max.bin")
        let state = scratch.url.appendingPathComponent("state")
        let out = scratch.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
        try Self.makeStore(
            state,
            records: [
                Self.record(url: server.url(for: "/max.bin").absoluteString, destination: out.path + "/", order: .max)
            ])
        let resumed = try await CLIProcess.run(["resume", "--state", "state", "-q"], in: scratch.url)
        #expect(resumed.signal == nil, "resume trapped: \(resumed)")
        if resumed.exitCode == 0 {
            try expectSameBytes(Data(contentsOf: out.appendingPathComponent("max.bin")), Data(content))
        }
    }

    /// SIGINT pauses every running download; one whose response head arrived but no body byte yet ends with
    /// `.paused` and no token, which the queue treats as a permanent failure: its record is removed, the batch
    /// reports it failed, and `resume --state` never fetches it.
    @Test("SIGINT before any body byte: every download stays in the store, paused; resume --state finishes them")
    func interruptBeforeFirstByte() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let content = Resource.generatedBytes(seed: 11, range: 0..<(200_000))
        let gate = BodyGate(holdingAfter: 0)
        var list = ""
        for index in 0..<3 {
            server.register(.bytes(content), at: "/h\(index).bin")
            server.enqueue(behavior: Behavior(gate: gate), for: "/h\(index).bin")
            list += server.url(for: "/h\(index).bin").absoluteString + "\n"
        }
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let process = try await CLIProcess.start(
            ["get", "-i", "list.txt", "-j", "3", "-o", "out/", "--state", "state"], in: scratch.url)
        #expect(await gate.waitUntilHeld(count: 3, timeout: CLIProcess.deadline), "\(gate)")
        process.send(SIGINT)
        let interrupted = try await process.finish()
        gate.open()
        #expect(interrupted.exitCode == 130, "\(interrupted)")
        #expect(!interrupted.stderr.contains("failed:") && !interrupted.stderr.contains("Failed"), "\(interrupted)")
        let listed = try await CLIProcess.run(["list", "--state", "state"], in: scratch.url)
        #expect(listed.stdout.components(separatedBy: "paused").count == 4, "lost from the store: \(listed.stdout)")
        _ = try await CLIProcess.run(["resume", "--state", "state", "-q"], in: scratch.url)
        for index in 0..<3 {
            #expect(
                (try? Data(contentsOf: scratch.url.appendingPathComponent("out/h\(index).bin"))) == Data(content),
                "h\(index).bin never downloaded")
        }
    }

    /// `list` opens `lock` with `O_RDONLY` and no `O_NONBLOCK`: a FIFO there (a store list was pointed at, which
    /// `list` never checks the way `TaskStore` does) blocks it forever.
    @Test("list --state on a store whose lock is a FIFO ends (a listing or a typed error), it does not hang")
    func listFifoLock() async throws {
        let scratch = try ScratchDirectory()
        let state = scratch.url.appendingPathComponent("state")
        try Self.makeStore(state, records: [])
        #expect(mkfifo(state.appendingPathComponent("lock").path, 0o600) == 0)
        let listed = try await CLIProcess.run(["list", "--state", "state"], in: scratch.url)
        #expect(listed.exitCode != nil, "\(listed)")
    }
}
