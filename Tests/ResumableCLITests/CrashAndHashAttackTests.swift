import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review (helper 50): crash consistency and verification through the real binary, with the debug
/// build's crash seam (`RESUMABLE_CRASH_AFTER_STEP`, `DurableSteps`).
@Suite("Crash and hash under attack")
struct CrashAndHashAttackTests {
    /// `get -i LIST --state DIR` of three files, killed (the crash seam, as kill -9) right after the first record was
    /// written, before the other two: the store held part of the list, `get -i` refused it and `resume --state`
    /// finished the one download it knew and exited 0 with two files of the list never downloaded. The list is now
    /// added to a suspended queue between the store's `adding` mark (step 1) and its removal: `resume --state`
    /// refuses such a store, and the same `get -i` drops the partial list and downloads all of it.
    @Test("get -i killed while adding its list: resume --state refuses, and the same get -i downloads the whole list")
    func batchCrashWhileAdding() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        var list = ""
        var contents: [String: [UInt8]] = [:]
        for index in 0..<3 {
            let name = "f\(index).bin"
            let bytes = Resource.generatedBytes(seed: UInt64(50 + index), range: 0..<Int64(30_000 + index))
            server.register(.bytes(bytes), at: "/\(name)")
            contents[name] = bytes
            list += server.url(for: "/\(name)").absoluteString + "\n"
        }
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let arguments = ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "-j", "1", "-q"]
        let out = scratch.url.appendingPathComponent("out")
        let tasks = scratch.url.appendingPathComponent("state/tasks")

        // Step 1 marks the addition, step 2 writes the first record.
        let crashed = try await CLIProcess.run(
            arguments, in: scratch.url, environment: ["RESUMABLE_CRASH_AFTER_STEP": "2"])
        try #require(crashed.exitCode == 137, "\(crashed)")
        try #require(scratch.contents(of: tasks).count == 1, "one record of three: \(scratch.contents(of: tasks))")

        let listed = try await CLIProcess.run(["list", "--state", "state"], in: scratch.url)
        #expect(listed.stdout.contains("interrupted while its list was being added"), "\(listed)")
        let listedJSON = try await CLIProcess.run(["list", "--state", "state", "--json"], in: scratch.url)
        #expect(listedJSON.stdout.contains("\"addingList\":true"), "\(listedJSON)")

        let resumed = try await CLIProcess.run(["resume", "--state", "state"], in: scratch.url)
        #expect(resumed.exitCode == 65, "\(resumed)")
        #expect(resumed.stderr.contains("get -i"), "\(resumed.stderr)")
        #expect(scratch.contents(of: out).isEmpty, "\(scratch.contents(of: out))")

        let again = try await CLIProcess.run(arguments, in: scratch.url)
        #expect(again.exitCode == 0, "\(again)")
        let listedAfter = try await CLIProcess.run(["list", "--state", "state", "--json"], in: scratch.url)
        #expect(listedAfter.stdout.contains("\"addingList\":false"), "\(listedAfter)")
        for (name, bytes) in contents {
            try expectSameBytes(Data(contentsOf: out.appendingPathComponent(name)), Data(bytes), "\(name)")
        }
        #expect(scratch.contents(of: out).sorted() == contents.keys.sorted(), "\(scratch.contents(of: out))")
        #expect(scratch.contents(of: tasks).isEmpty, "\(scratch.contents(of: tasks))")
        #expect(!FileManager.default.fileExists(atPath: scratch.url.appendingPathComponent("state/adding").path))
    }

    /// `get --sha256` with the wrong digest: the partial file is deleted on the mismatch. Killed right after that
    /// unlink, the token file must already be gone: a complete token without its bytes made `resume` call a file of
    /// that length at the destination "already finished".
    @Test("get --sha256 with a mismatch, killed right after the partial file's removal, leaves no token behind")
    func singleMismatchCrashLeavesNoToken() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.generated(length: 10_000, seed: 73), at: "/f.bin")
        let arguments = [
            "get", server.url(for: "/f.bin").absoluteString, "-o", "out/", "-q", "--sha256",
            String(repeating: "ab", count: 32),
        ]
        let dry = try ScratchDirectory()
        _ = try dry.subdirectory("out")
        let log = dry.file("steps.log")
        let listed = try await CLIProcess.run(arguments, in: dry.url, environment: ["RESUMABLE_STEP_LOG": log.path])
        try #require(listed.exitCode == 1, "\(listed)")
        let steps = Self.steps(at: log)
        let removal = try #require(steps.last { $0.kind == "unlink" && $0.path.hasSuffix(".partial") }, "\(steps)")

        let scratch = try ScratchDirectory()
        _ = try scratch.subdirectory("out")
        let crashed = try await CLIProcess.run(
            arguments, in: scratch.url, environment: ["RESUMABLE_CRASH_AFTER_STEP": String(removal.number)])
        try #require(crashed.exitCode == 137, "\(crashed)")
        let out = scratch.url.appendingPathComponent("out")
        #expect(scratch.partialFiles(in: out).isEmpty, "\(scratch.contents(of: out))")
        #expect(
            !scratch.contents(of: out).contains { $0.hasSuffix(".resumable.json") },
            "a token outlived its removed partial file: \(scratch.contents(of: out))")
    }

    /// The steps a run logged (`RESUMABLE_STEP_LOG`): number, kind, path.
    static func steps(at url: URL) -> [(number: Int, kind: String, path: String)] {
        guard let text = try? String(contentsOf: url, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ", maxSplits: 2).map(String.init)
            guard fields.count == 3, let number = Int(fields[0]) else { return nil }
            return (number, fields[1], fields[2])
        }.sorted { $0.number < $1.number }
    }

    /// The token of the only record in `state/tasks`, as JSON.
    static func onlyRecordToken(_ state: URL) throws -> [String: Any] {
        let tasks = state.appendingPathComponent("tasks")
        let names = try FileManager.default.contentsOfDirectory(atPath: tasks.path).filter { $0.hasSuffix(".json") }
        try #require(names.count == 1, "\(names)")
        let data = try Data(contentsOf: tasks.appendingPathComponent(names[0]))
        let record = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        return try #require(record["token"] as? [String: Any], "\(String(decoding: data, as: UTF8.self))")
    }

    /// A queue (`get -i --state`) leaves no `abandoned` hook to the engine: when a download ends with nothing to
    /// resume (a checksum mismatch), the engine removes the temporary file first, and the queue removes the record
    /// only later, on its own actor. A crash in between leaves a record whose token names a temporary file that is
    /// gone. When that token is complete (the last token before a finish, or a periodic one at the end), the next
    /// `resume --state` takes a file of that length at the destination for the download "moved into place"
    /// (`Reconciliation.movedIntoPlace`), reports it `finishedEarlier` and exits 0, although the file there is not
    /// the server's and its SHA-256 is not the one the list demands. (`resumable get` alone is not affected: its
    /// `Checkpointing.file`-like hook removes the token before the file.)
    ///
    /// Reproduction: `out/f.bin` is an older file of the same length; the list asks for the server's `f.bin` with
    /// its `sha256=`. Run 1 is killed right after the complete token reached the record (before the token that
    /// names the free name `f (1).bin`, and before the move). The
    /// partial file is then damaged (one byte, same length: a bad sector). Run 2 (`resume --state`) finds the
    /// mismatch, deletes the partial file, and is killed right after that unlink. Run 3 (`resume --state`): exit 0,
    /// "1 finished", and `out/f.bin` is still the old file.
    @Test(
        "A checksum mismatch in a batch, killed right after the partial file's removal: no record is left, and no old file of that length is called finished"
    )
    func batchMismatchCrashThenFinishedEarlier() async throws {
        let length = 10_000
        let served = Resource.generatedBytes(seed: 71, range: 0..<Int64(length))
        let old = Resource.generatedBytes(seed: 72, range: 0..<Int64(length))
        var digest = PortableSHA256()
        digest.update(served)
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.register(.bytes(served), at: "/f.bin")
        let list = server.url(for: "/f.bin").absoluteString + "\n  sha256=\(digest.hexDigest())\n"
        let arguments = ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "-j", "1", "-q"]

        func prepare() throws -> ScratchDirectory {
            let scratch = try ScratchDirectory()
            try Data(list.utf8).write(to: scratch.file("list.txt"))
            let out = try scratch.subdirectory("out")
            try Data(old).write(to: out.appendingPathComponent("f.bin"))
            return scratch
        }

        // A dry run lists the steps: the crash goes right after the last record write before the move.
        let dry = try prepare()
        let log = dry.file("steps.log")
        let listed = try await CLIProcess.run(arguments, in: dry.url, environment: ["RESUMABLE_STEP_LOG": log.path])
        try #require(listed.exitCode == 0, "\(listed)")
        let steps = Self.steps(at: log)
        let move = try #require(
            steps.firstIndex { $0.kind == "rename" && $0.path.hasSuffix("/out/f (1).bin") }, "\(steps)")
        // The last two record writes before the move: the complete token, then the same naming the free name
        // (`finalName`). The crash goes after the first: its token names no free name.
        let recordWrites = steps[..<move].filter { $0.kind == "token-write" && $0.path.contains("/state/tasks/") }
        try #require(recordWrites.count >= 2, "\(steps)")
        let lastToken = recordWrites[recordWrites.count - 2]

        let scratch = try prepare()
        let state = scratch.url.appendingPathComponent("state")
        let out = scratch.url.appendingPathComponent("out")
        let first = try await CLIProcess.run(
            arguments, in: scratch.url, environment: ["RESUMABLE_CRASH_AFTER_STEP": String(lastToken.number)])
        try #require(first.exitCode == 137, "\(first)")
        let token = try Self.onlyRecordToken(state)
        let tempPath = try #require(token["tempPath"] as? String)
        try #require((token["offset"] as? NSNumber)?.intValue == length, "the record's token is complete: \(token)")
        try #require(token["finalName"] == nil, "\(token)")
        try #require(FileManager.default.fileExists(atPath: tempPath))

        // One byte of the partial file goes bad (same length).
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: tempPath))
        try handle.seek(toOffset: 100)
        try handle.write(contentsOf: Data([served[100] ^ 0xff]))
        try handle.close()

        // The mismatch is found; killed right after the partial file is removed.
        let second = try await CLIProcess.run(
            ["resume", "--state", "state", "-q"], in: scratch.url,
            environment: ["RESUMABLE_CRASH_AFTER_STEP_MATCHING": "unlink " + tempPath])
        try #require(second.exitCode == 137, "\(second)")
        try #require(!FileManager.default.fileExists(atPath: tempPath))
        // Fixed: the record forgets its token (flushed) before the temporary file goes, so no record names a
        // removed file; the record stays, and the next run downloads the file again from its first byte.
        let tasks = state.appendingPathComponent("tasks")
        let records = scratch.contents(of: tasks).filter { $0.hasSuffix(".json") }
        #expect(records.count == 1, "\(scratch.contents(of: tasks))")
        for name in records {
            let record = try Data(contentsOf: tasks.appendingPathComponent(name))
            #expect(
                !String(decoding: record, as: UTF8.self).contains(tempPath),
                "a record names its removed temporary file: \(String(decoding: record, as: UTF8.self))")
        }

        let third = try await CLIProcess.run(["resume", "--state", "state"], in: scratch.url)
        #expect(third.exitCode == 0, "\(third)")
        #expect(scratch.contents(of: out) == ["f (1).bin", "f.bin"], "\(scratch.contents(of: out))")
        #expect(
            try Data(contentsOf: out.appendingPathComponent("f.bin")) == Data(old), "never replaced (no --overwrite)")
        try expectSameBytes(Data(contentsOf: out.appendingPathComponent("f (1).bin")), Data(served), "downloaded again")
    }
}
