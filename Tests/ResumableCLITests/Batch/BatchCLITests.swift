import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `get -i LIST -j N --state DIR`, `resume --state DIR` and `list --state DIR` through the real binary.
@Suite("Batches: get -i, resume --state, list")
struct BatchCLITests {
    /// The offset of each record's token in the store, by URL path.
    static func recordedOffsets(_ state: URL) -> [String: Int64] {
        let tasks = state.appendingPathComponent("tasks")
        var offsets: [String: Int64] = [:]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: tasks.path)) ?? []
        where name.hasSuffix(".json") {
            guard let data = try? Data(contentsOf: tasks.appendingPathComponent(name)),
                let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
                let url = (object["url"] as? String).flatMap(URL.init(string:))
            else { continue }
            let token = object["token"] as? [String: Any]
            offsets[url.path] = (token?["offset"] as? NSNumber)?.int64Value ?? 0
        }
        return offsets
    }

    @Test("--json --quiet prints the final object on standard output and no event line, as a single get does")
    func jsonQuietBatch() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        var list = ""
        for index in 0..<3 {
            server.register(.generated(length: 20_000, seed: UInt64(index + 1)), at: "/q\(index).bin")
            list += server.url(for: "/q\(index).bin").absoluteString + "\n"
        }
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let quiet = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-j", "2", "-o", "out/", "--json", "--quiet"], in: scratch.url)
        #expect(quiet.exitCode == 0, "\(quiet)")
        #expect(quiet.stderr.isEmpty, "\(quiet.stderr)")
        let object = try JSONSerialization.jsonObject(with: Data(quiet.stdout.utf8)) as? [String: Any]
        #expect(object?["status"] as? String == "completed", "\(quiet.stdout)")
        #expect((object?["finished"] as? NSNumber)?.intValue == 3)
        // Without --quiet, the events are there.
        let loud = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-j", "2", "-o", "again/", "--json"], in: scratch.url)
        #expect(loud.exitCode == 0, "\(loud)")
        #expect(loud.stderrLines.filter { $0.contains("\"task-finished\"") }.count == 3, "\(loud.stderr)")
    }

    @Test("A list with a 404, a dropped connection and an out= name: every other file is exact, exit 1, a summary")
    func smallBatch() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        var bytes: [String: [UInt8]] = [:]
        var list = ""
        for index in 0..<12 {
            let path = "/f\(index).bin"
            if index != 3 {
                let content = Resource.generatedBytes(seed: UInt64(index + 1), range: 0..<Int64(40_000 + index))
                server.register(.bytes(content), at: path)
                bytes[path] = content
            }
            list += server.url(for: path).absoluteString + "\n"
        }
        server.enqueue(behavior: Behavior(dropAfterBytes: 10_000), for: "/f5.bin")
        list += "# a comment\n" + server.url(for: "/f0.bin").absoluteString + "\n  out=copy.bin\n"
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let result = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-j", "3", "-o", "out/", "--retries", "2"], in: scratch.url)
        #expect(result.exitCode == 1, "\(result)")
        #expect(result.stderr.contains("12 finished, 1 failed, 0 left"), "\(result.stderr)")
        #expect(result.stderr.contains("404"), "the failure says why")
        let out = scratch.url.appendingPathComponent("out")
        for (path, content) in bytes {
            try expectSameBytes(Data(contentsOf: out.appendingPathComponent(String(path.dropFirst()))), Data(content))
        }
        try expectSameBytes(Data(contentsOf: out.appendingPathComponent("copy.bin")), Data(bytes["/f0.bin"]!))
        // The out= entry is reported under the file it was saved to; f0.bin's own entry under its URL's name.
        #expect(result.stderr.contains("Started copy.bin"), "\(result.stderr)")
        #expect(result.stderr.components(separatedBy: "Started f0.bin").count == 2, "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out.appendingPathComponent("f3.bin").path))
        let listed = try await CLIProcess.run(["list", "--state", "out/.resumable-state", "--json"], in: scratch.url)
        #expect(listed.exitCode == 0, "\(listed)")
        #expect(listed.stdout.contains("\"downloads\":[]"), "\(listed.stdout)")
    }

    @Test("Usage: -i with a URL, --jobs out of range, --state without -i, a bad list: exit 64 or 65 before any request")
    func usage() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        try Data("http://127.0.0.1:1/a\n  dir=/etc\n".utf8).write(to: scratch.file("bad.txt"))
        try Data("\(server.url(for: "/a"))\n".utf8).write(to: scratch.file("good.txt"))
        let cases: [([String], Int32)] = [
            (["get", "-i", "good.txt", server.url(for: "/a").absoluteString], 64),
            (["get", "-i", "good.txt", "-j", "0"], 64),
            (["get", "-i", "good.txt", "-j", "65"], 64),
            (["get", server.url(for: "/a").absoluteString, "--state", "s"], 64),
            (["get", "-i", "bad.txt"], 65),
            (["get", "-i", "missing.txt"], 65),
            (["resume", "--state", "nowhere"], 65),
            (["list", "--state", "nowhere"], 65),
            (["resume", "token.json", "-j", "2"], 64),
        ]
        for (arguments, status) in cases {
            let result = try await CLIProcess.run(arguments, in: scratch.url)
            #expect(result.exitCode == status, "\(arguments): \(result)")
        }
        #expect(server.requests(for: "/a").isEmpty)
    }

    @Test(
        "A list with a user:password@ URL on line 3: exit 65 naming the line, the secret never shown, nothing written")
    func credentialsInList() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let good = server.url(for: "/a").absoluteString
        let withSecret = good.replacingOccurrences(of: "http://", with: "http://user:hunter2@")
        try Data("\(good)\n\(good)?b\n\(withSecret)?c\n".utf8).write(to: scratch.file("list.txt"))
        let result = try await CLIProcess.run(["get", "-i", "list.txt", "-o", "out/", "--state", "s"], in: scratch.url)
        #expect(result.exitCode == 65, "\(result)")
        #expect(result.stderr.contains("line 3"), "\(result)")
        #expect(!result.stderr.contains("hunter2") && !result.stdout.contains("hunter2"), "\(result)")
        #expect(!FileManager.default.fileExists(atPath: scratch.file("s").path), "a state directory was made")
        #expect(server.requests(for: "/a").isEmpty)
    }

    @Test(
        "200 files with 404s, drops and changes, killed with SIGKILL twice: resume --state ends with every file exact or reported, nothing on disk fetched again"
    )
    func killTwice() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let big: Int64 = 4 << 20
        var versions: [String: [UInt8]] = [:]
        var list = ""
        // Held at the first kill (15, 35, 55, 75) and at the second (115, 135, 155, 175): 4 MiB each, the rest small.
        let firstHeld = [15, 35, 55, 75]
        let secondHeld = [115, 135, 155, 175]
        for index in 0..<200 {
            let path = "/f\(index).bin"
            list += server.url(for: path).absoluteString + "\n"
            if index % 20 == 0 { continue }  // 404
            let length = firstHeld.contains(index) || secondHeld.contains(index) ? big : Int64(16_384 + index)
            let content = Resource.generatedBytes(seed: UInt64(index + 1), range: 0..<length)
            server.register(.bytes(content), at: path)
            versions[path] = content
            if index % 20 == 5 { server.enqueue(behavior: Behavior(dropAfterBytes: 5_000), for: path) }
        }
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let state = scratch.url.appendingPathComponent("state")
        let out = scratch.url.appendingPathComponent("out")

        func runUntilHeld(_ arguments: [String], held: [Int]) async throws -> [String: Int64] {
            let gate = BodyGate(holdingAfter: 64 << 10)
            for index in held { server.enqueue(behavior: Behavior(gate: gate), for: "/f\(index).bin") }
            defer { gate.open() }
            let process = try await CLIProcess.start(arguments, in: scratch.url)
            #expect(await gate.waitUntilHeld(count: 4, timeout: CLIProcess.deadline), "\(gate) \(process.stderrSoFar)")
            // Let the four go on in small steps until each one's record holds a checkpoint past 64 KiB.
            let checkpointed = try await trickle(gate, bodyLength: big) {
                let offsets = Self.recordedOffsets(state)
                return held.allSatisfy { (offsets["/f\($0).bin"] ?? 0) > 64 << 10 }
            }
            #expect(checkpointed, "\(Self.recordedOffsets(state))")
            process.send(SIGKILL)
            let killed = try await process.finish()
            #expect(killed.signal == SIGKILL, "\(killed)")
            return Self.recordedOffsets(state)
        }

        // Kill 1, in the middle of the first run.
        let afterFirst = try await runUntilHeld(
            ["get", "-i", "list.txt", "-j", "4", "-o", "out/", "--state", "state", "--retries", "3", "-q"],
            held: firstHeld)
        // Two of the held files change on the server while nothing runs: their resumes must restart from 0.
        for index in [15, 35] {
            let content = Resource.generatedBytes(seed: UInt64(1000 + index), range: 0..<(big - 1000))
            server.register(.bytes(content), at: "/f\(index).bin")
            versions["/f\(index).bin"] = content
        }
        server.clearRequests()
        // Kill 2, in the middle of the resume.
        let afterSecond = try await runUntilHeld(["resume", "--state", "state", "-j", "4", "-q"], held: secondHeld)
        // Nothing safely on disk at kill 1 was asked for again (the unchanged held files continued at their offset).
        for index in [55, 75] {
            let path = "/f\(index).bin"
            let offset = try #require(afterFirst[path])
            let first = server.requests(for: path).first
            #expect(first?.header("Range") == "bytes=\(offset)-", "\(path): \(String(describing: first))")
        }
        server.clearRequests()
        let last = try await CLIProcess.run(["resume", "--state", "state", "-j", "4"], in: scratch.url)
        #expect(last.exitCode == 1, "the 404s are permanent failures: \(last)")
        for index in secondHeld {
            let path = "/f\(index).bin"
            let offset = try #require(afterSecond[path])
            #expect(server.requests(for: path).first?.header("Range") == "bytes=\(offset)-")
        }
        // Every file is exactly the server's (current version), or absent and was a 404.
        for index in 0..<200 {
            let file = out.appendingPathComponent("f\(index).bin")
            if let content = versions["/f\(index).bin"] {
                expectSameBytes((try? Data(contentsOf: file)), Data(content), "f\(index).bin")
            } else {
                #expect(!FileManager.default.fileExists(atPath: file.path))
            }
        }
        // The 404s were reported in the runs; nothing is left to resume, no partial file, no record.
        #expect(try FileManager.default.contentsOfDirectory(atPath: state.appendingPathComponent("tasks").path).isEmpty)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: state.appendingPathComponent("partial").path).isEmpty)
        #expect(scratch.partialFiles(in: out).isEmpty)
    }

    @Test("list while a batch runs: the running download shows as running, with the rate between its checkpoints")
    func listShowsRunningRate() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let length = 4 << 20
        server.register(.bytes(Resource.generatedBytes(seed: 12, range: 0..<Int64(length))), at: "/r.bin")
        let gate = BodyGate(holdingAfter: 64 << 10)
        server.enqueue(behavior: Behavior(gate: gate), for: "/r.bin")
        defer { gate.open() }
        try Data((server.url(for: "/r.bin").absoluteString + "\n").utf8).write(to: scratch.file("list.txt"))
        let process = try await CLIProcess.start(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "-q"], in: scratch.url)
        #expect(await gate.waitUntilHeld(timeout: CLIProcess.deadline), "\(gate)")
        let tasks = scratch.url.appendingPathComponent("state/tasks")
        // The time of the last checkpoint that recorded a rate, as the record on disk says.
        let lastRatedCheckpoint: @Sendable () -> String? = {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: tasks.path)) ?? []
            return names.lazy.compactMap { name -> String? in
                guard let data = try? Data(contentsOf: tasks.appendingPathComponent(name)),
                    let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
                    ((object["bytesPerSecond"] as? NSNumber)?.int64Value ?? 0) > 0
                else { return nil }
                return object["checkpointedAt"] as? String
            }.first
        }
        // A listing within ten seconds of the last checkpoint calls the download running; a busy machine may delay
        // the listing past that, so let bytes go by until a newer checkpoint is on disk, and list again.
        var listed: CLIResult?
        var previous: String?
        for _ in 0..<5 {
            let seen = previous
            let newer: @Sendable () -> Bool = { lastRatedCheckpoint().map { $0 != seen } ?? false }
            #expect(try await trickle(gate, bodyLength: Int64(length), until: newer))
            previous = lastRatedCheckpoint()
            let result = try await CLIProcess.run(["list", "--state", "state", "--json"], in: scratch.url)
            // The download's state, not the top-level "running" (whether a batch holds the store).
            let object = try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
            if ((object?["downloads"] as? [[String: Any]])?.first?["state"] as? String) == "running" {
                listed = result
                break
            }
        }
        let json = try #require(listed, "list never showed the download running")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect(object["running"] as? Bool == true)
        let download = try #require((object["downloads"] as? [[String: Any]])?.first)
        #expect(download["state"] as? String == "running")
        #expect(((download["bytesPerSecond"] as? NSNumber)?.int64Value ?? 0) > 0, "\(download)")
        process.send(SIGINT)
        let interrupted = try await process.finish()
        #expect(interrupted.exitCode == 130, "\(interrupted)")
        let after = try await CLIProcess.run(["list", "--state", "state", "--json"], in: scratch.url)
        let paused = try #require(try JSONSerialization.jsonObject(with: Data(after.stdout.utf8)) as? [String: Any])
        let pausedDownload = try #require((paused["downloads"] as? [[String: Any]])?.first)
        #expect(pausedDownload["state"] as? String == "paused")
        #expect((pausedDownload["bytesPerSecond"] as? NSNumber)?.int64Value == 0)
    }

    @Test("SIGINT pauses the whole batch into the store (exit 130); list shows it; resume --state finishes it")
    func interruptAndResume() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let content = Resource.generatedBytes(seed: 9, range: 0..<(1 << 20))
        var list = ""
        let gate = BodyGate(holdingAfter: 100_000)
        for index in 0..<3 {
            server.register(.bytes(content), at: "/g\(index).bin")
            server.enqueue(behavior: Behavior(gate: gate), for: "/g\(index).bin")
            list += server.url(for: "/g\(index).bin").absoluteString + "\n"
        }
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let process = try await CLIProcess.start(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state"], in: scratch.url)
        #expect(await gate.waitUntilHeld(count: 3, timeout: CLIProcess.deadline), "\(gate)")
        // Held by the server is not yet written by the client: wait for the three temporary files to hold it all.
        let partial = scratch.url.appendingPathComponent("state/partial")
        let written = try await eventually {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: partial.path)) ?? []
            let sizes = names.compactMap {
                (try? FileManager.default.attributesOfItem(atPath: partial.appendingPathComponent($0).path))?[.size]
                    as? NSNumber
            }
            return sizes.count == 3 && sizes.allSatisfy { $0.int64Value == 100_000 }
        }
        #expect(written)
        process.send(SIGINT)
        let interrupted = try await process.finish()
        gate.open()
        #expect(interrupted.exitCode == 130, "\(interrupted)")
        let listed = try await CLIProcess.run(["list", "--state", "state"], in: scratch.url)
        #expect(listed.exitCode == 0, "\(listed)")
        #expect(listed.stdout.components(separatedBy: "paused  97.7 KiB / 1.0 MiB").count == 4, "\(listed.stdout)")
        let resumed = try await CLIProcess.run(["resume", "--state", "state", "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        for index in 0..<3 {
            try expectSameBytes(
                Data(contentsOf: scratch.url.appendingPathComponent("out/g\(index).bin")), Data(content))
            #expect(server.requests(for: "/g\(index).bin").last?.header("Range") == "bytes=100000-")
        }
    }
}
