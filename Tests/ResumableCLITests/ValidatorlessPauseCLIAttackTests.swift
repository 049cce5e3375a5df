import Foundation
import LoopbackServer
import Synchronization
import Testing

/// Adversarial review (helper 87) of 07bbfbd, through the CLI: `get --connections 4` learns that the server's 206s
/// carry no validator (`partialsNeedValidators`), restarts in one piece, is paused (SIGINT, exit 130), and
/// `resume <token>` in a new process joins the validator-less 206 of another version.
///
/// The server (a cache that drops validators from 206s and ignores If-Range, its origin's file replaced): a plain GET
/// gets a 200 of version 1 with a strong ETag; every range request a 206 of version 2 without validators. The first
/// 200 sends 1 MiB, then the rest once a range was answered; the second (the restart) sends 1 MiB and holds until
/// the test releases it; later ones send the whole of version 1.
@Suite("Attack (CLI): a pause forgets that the server's 206s need validators")
struct ValidatorlessPauseCLIAttackTests {
    static let total: Int64 = 8 << 20
    static let one = Resource.generatedBytes(seed: 8792, range: 0..<total)
    static let two = Resource.generatedBytes(seed: 8793, range: 0..<total)

    private final class State: Sendable {
        let wholes = Atomic<Int>(0)
        let partials = Atomic<Int>(0)
        let released = Atomic<Bool>(false)
    }

    private static func server(_ state: State) throws -> RawScriptServer {
        try RawScriptServer { head, _, send in
            guard head.starts(with: Array("GET ".utf8)) else { return .completed(0) }
            if let value = RawScriptServer.header("Range", in: head).map({ String(decoding: $0, as: UTF8.self) }),
                value.hasPrefix("bytes=")
            {
                let parts = value.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false)
                if parts.count == 2, let first = Int64(parts[0]), first < Self.total {
                    let last = min(Int64(parts[1]) ?? (Self.total - 1), Self.total - 1)
                    state.partials.add(1, ordering: .sequentiallyConsistent)
                    let response =
                        RawScriptServer.head(
                            "206 Partial Content",
                            [
                                "Accept-Ranges: bytes", "Date: Tue, 02 Jan 2024 00:00:00 GMT",
                                "Content-Range: bytes \(first)-\(last)/\(Self.total)",
                                "Content-Length: \(last - first + 1)",
                            ]) + Array(Self.two[Int(first)...Int(last)])
                    return send(response) ? .completed(206) : .clientLeft(0)
                }
            }
            let number = state.wholes.add(1, ordering: .sequentiallyConsistent).newValue
            let head =
                RawScriptServer.head(
                    "200 OK",
                    [
                        "Accept-Ranges: bytes", "Last-Modified: Mon, 01 Jan 2024 00:00:00 GMT",
                        "Date: Tue, 02 Jan 2024 00:00:00 GMT", "Content-Length: \(Self.total)",
                    ], etag: Array("\"cli-pause-v1\"".utf8))
            if number > 2 { return send(head + Self.one) ? .completed(200) : .clientLeft(0) }
            guard send(head + Array(Self.one[0..<(1 << 20)])) else { return .clientLeft(0) }
            // Events, not delays: 60 s only bound a client that never does what the test waits for.
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(60)
            if number == 1 {
                while state.partials.load(ordering: .sequentiallyConsistent) == 0, clock.now < deadline { usleep(1000) }
            } else {
                while !state.released.load(ordering: .sequentiallyConsistent), clock.now < deadline { usleep(1000) }
            }
            return send(Array(Self.one[(1 << 20)...])) ? .completed(200) : .clientLeft(0)
        }
    }

    /// Rule 1. Observed: `get` reports "Restarting from the beginning", holds 1 MiB of version 1, exits 130 on
    /// SIGINT; `resume` (default connections: one, as less than 16 MiB is missing) continues at byte 1048576 and exits 0 with version 1 up to 1 MiB and version 2 after.
    /// Cause: `ResumeStateMachine.partialsNeedValidators` (`Sources/Resumable/Resume/ResumeStateMachine.swift:114`)
    /// is in memory only; the token file does not carry it.
    @Test("get --connections 4, SIGINT after the restart, resume: never a file of two versions")
    func pauseThenResume() async throws {
        let state = State()
        let server = try Self.server(state)
        defer {
            state.released.store(true, ordering: .sequentiallyConsistent)
            server.stop()
        }
        let directory = try TemporaryDirectory()
        let token = directory.url.appendingPathComponent("t.json").path
        let url = "http://127.0.0.1:\(server.port)/file.bin"
        let get = try await CLIProcess.start(
            ["get", url, "-o", directory.url.path, "--connections", "4", "--token", token], in: directory.url)
        let held = try await eventually {
            let names = try FileManager.default.contentsOfDirectory(atPath: directory.url.path)
            let sizes = names.filter { $0.hasSuffix(".partial") }.compactMap {
                try? FileManager.default.attributesOfItem(atPath: directory.url.appendingPathComponent($0).path)[.size]
                    as? Int64
            }
            return get.stderrSoFar.contains("Restarting from the beginning") && sizes.contains(1 << 20)
        }
        #expect(held, "stderr: \(get.stderrSoFar)")
        get.send(SIGINT)
        let paused = try await get.finish()
        state.released.store(true, ordering: .sequentiallyConsistent)
        #expect(paused.exitCode == 130, "\(paused)")
        let resumed = try await CLIProcess.run(["resume", token], in: directory.url)
        let file = directory.url.appendingPathComponent("file.bin")
        if resumed.exitCode == 0 {
            let saved = try Data(contentsOf: file)
            let firstDiff = Array(zip(saved, Self.one)).firstIndex { $0.0 != $0.1 } ?? -1
            #expect(
                saved == Data(Self.one) || saved == Data(Self.two),
                "spliced: differs from version 1 at \(firstDiff); \(resumed)")
        }
    }
}
