import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `resume TOKEN -o OTHER/` with the temporary file in another directory: the bytes move beside the new destination
/// first, so that every later token pairs that destination with a file its reader accepts.
@Suite("Resuming into another directory")
struct ResumeIntoAnotherDirectoryTests {
    static let length: Int64 = 200_000
    static let cut: Int64 = 20_000
    static let patient = ["--timeout", "3600", "--connections", "1"]

    /// `get -o first/` cut at ``cut`` bytes (exit 75): its token is `first/file.bin.resumable.json`; `other/` exists.
    static func cutInFirst(transport: String) async throws -> (
        served: ServedFile, scratch: ScratchDirectory, first: URL, other: URL, token: URL
    ) {
        let served = try ServedFile(length: length)
        let scratch = try ScratchDirectory()
        let first = try scratch.subdirectory("first")
        let other = try scratch.subdirectory("other")
        served.server.enqueue(behavior: Behavior(dropAfterBytes: cut), for: served.path)
        let get = try await CLIProcess.run(
            ["get", served.url, "-o", first.path + "/", "--retries", "0", "-q", "--transport", transport] + patient,
            in: scratch.url)
        try #require(get.exitCode == 75, "\(get)")
        return (served, scratch, first, other, first.appendingPathComponent("file.bin.resumable.json"))
    }

    /// Found by an attack (helper 59): the resume went on in the token's temporary file in the first directory while
    /// its tokens named OTHER/ as the destination; interrupted, it left a token that `resume TOKEN` refused (exit 65,
    /// "tempPath is not in the destination's directory"), with or without `-o OTHER/` again.
    @Test(
        "An interrupted resume -o OTHER/ leaves a token that resume continues (to OTHER/) to the exact bytes",
        arguments: ["libcurl", "urlsession"], [false, true])
    func interruptedResumeIntoAnotherDirectory(transport: String, outputAgain: Bool) async throws {
        let (served, scratch, first, other, tokenURL) = try await Self.cutInFirst(transport: transport)
        let gate = served.holdBody(after: 10_000)
        let second = try CLIProcess(
            ["resume", tokenURL.path, "-o", other.path + "/", "--transport", transport] + Self.patient,
            in: scratch.url)
        try #require(await gate.waitUntilHeld())
        // The bytes were copied beside the new destination before the request; the old file stays, locked, until the
        // task ends.
        let partial = try #require(scratch.partialFiles(in: other).first)
        let written = try await eventually {
            let size =
                try? FileManager.default.attributesOfItem(
                    atPath: other.appendingPathComponent(partial).path)[.size] as? NSNumber
            return size?.int64Value == Self.cut + 10_000
        }
        #expect(written)
        second.send(SIGINT)
        let interrupted = try await second.finish()
        #expect(interrupted.exitCode == 130, "\(interrupted)")
        let token = try ResumeToken(contentsOf: tokenURL)
        #expect(token.offset == Self.cut + 10_000)
        #expect(token.tempPath == other.appendingPathComponent(partial).path)
        #expect(scratch.partialFiles(in: first).isEmpty, "the old file outlived the task")
        served.setBehavior(.normal)
        let third = try await CLIProcess.run(
            ["resume", tokenURL.path, "-q", "--transport", transport] + (outputAgain ? ["-o", other.path + "/"] : []),
            in: scratch.url)
        #expect(third.exitCode == 0, "\(third)")
        if third.exitCode == 0 {
            try expectSameBytes(Data(contentsOf: other.appendingPathComponent("file.bin")), served.bytes)
            #expect(served.ranges.last == "bytes=\(token.offset)-", "the bytes on disk were downloaded again")
            #expect(scratch.partialFiles(in: other).isEmpty && scratch.partialFiles(in: first).isEmpty)
            #expect(!FileManager.default.fileExists(atPath: first.appendingPathComponent("file.bin").path))
        }
    }

    /// The move's order, step by step: a crash after each durable step of the relocation (the copy's creation, its
    /// writes and flush, the token write, the old file's removal) leaves a token whose resume into OTHER/ finishes the
    /// exact file without asking again for a byte the token covered.
    @Test("A crash after each step of the move into another directory, then resume -o OTHER/: the exact file")
    func crashDuringTheMove() async throws {
        let (served, scratch, first, other, tokenURL) = try await Self.cutInFirst(transport: "libcurl")
        let snapshot = try scratch.subdirectory("snapshot")
        try FileManager.default.copyItem(at: first, to: snapshot.appendingPathComponent("first"))
        let resume = ["resume", tokenURL.path, "-o", other.path + "/", "-q"] + Self.patient

        func restore() throws {
            for directory in [first, other] { try FileManager.default.removeItem(at: directory) }
            try FileManager.default.copyItem(at: snapshot.appendingPathComponent("first"), to: first)
            try FileManager.default.createDirectory(at: other, withIntermediateDirectories: true)
        }

        // The steps of a whole run; the move's come before any request, and end with the token naming the copy. The
        // old file stays until the task ends (removed with the finish, which other crash tests cover).
        let log = scratch.url.appendingPathComponent("steps.log")
        let dry = try await CLIProcess.run(resume, in: scratch.url, environment: ["RESUMABLE_STEP_LOG": log.path])
        try #require(dry.exitCode == 0, "\(dry)")
        let steps = try String(contentsOf: log, encoding: .utf8).split(separator: "\n").map(String.init)
        let recorded = try #require(steps.firstIndex { $0.contains(" token-write ") }, "\(steps)")
        let kinds = steps[...recorded].map { $0.split(separator: " ")[1] }
        #expect(kinds.first == "create" && kinds.contains("flush"), "\(steps)")
        #expect(steps[...recorded].allSatisfy { !$0.contains(first.path + "/.resumable-") }, "\(steps)")
        #expect(
            steps.contains { $0.contains(" unlink ") && $0.contains(first.path) && $0.hasSuffix(".partial") },
            "the old file goes when the task ends: \(steps)")

        for step in 1...(recorded + 2) {
            try restore()
            served.server.clearRequests()
            let crashed = try await CLIProcess.run(
                resume, in: scratch.url, environment: ["RESUMABLE_CRASH_AFTER_STEP": String(step)])
            #expect(crashed.exitCode == 137, "step \(step): \(crashed)")
            served.server.clearRequests()
            let finished = try await CLIProcess.run(resume, in: scratch.url)
            #expect(finished.exitCode == 0, "after step \(step) (\(steps[step - 1])): \(finished)")
            #expect(
                (try? Data(contentsOf: other.appendingPathComponent("file.bin"))) == served.bytes,
                "after step \(step)")
            #expect(served.ranges.first == "bytes=\(Self.cut)-", "after step \(step): \(served.ranges)")
            #expect(!FileManager.default.fileExists(atPath: first.appendingPathComponent("file.bin").path))
            // At most the copy a crash left unnamed, or the old file a crash kept, stays behind: never both.
            let strays = scratch.partialFiles(in: first).count + scratch.partialFiles(in: other).count
            #expect(
                strays <= 1, "after step \(step): \(scratch.partialFiles(in: first)) \(scratch.partialFiles(in: other))"
            )
        }
    }
}
