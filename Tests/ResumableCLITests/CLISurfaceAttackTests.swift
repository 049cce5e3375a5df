import Foundation
import LoopbackServer
import Resumable
import Synchronization
import Testing

/// Attacks on the command line's surface through the built binary: output paths, tokens, exit statuses.
@Suite("CLI surface attacks")
struct CLISurfaceAttackTests {
    /// A directory name with a tab in it: a legal file name on Linux, and one a user may well have. The CLI accepts
    /// it as the place to download into; the token it writes there records it as the destination.
    private static let tabbedName = "my\tdownloads"

    @Test("get in a directory whose name holds a tab: the interrupted download leaves a token that resume continues")
    func tabInDestinationKeepsTheDownloadResumable() async throws {
        let served = try ServedFile(behavior: Behavior(dropAfterBytes: 100_000))
        let scratch = try ScratchDirectory()
        let directory = try scratch.subdirectory(Self.tabbedName)
        // No -o at all: the current directory is the destination.
        let first = try await CLIProcess.run(["get", served.url, "--retries", "0", "-q"], in: directory)
        try #require(first.exitCode == 75, "\(first)")
        let tokens = scratch.contents(of: directory).filter { $0.hasSuffix(".resumable.json") }
        // One download, one token file (docs/cli.md, Token files).
        #expect(tokens == ["file.bin.resumable.json"], "\(tokens)")
        guard let tokenName = tokens.last else { return }
        let tokenURL = directory.appendingPathComponent(tokenName)
        // Every token file this run left must be one `resume` can use: 100 000 bytes are on disk.
        let inspect = try await CLIProcess.run(["inspect", tokenURL.path], in: directory)
        #expect(inspect.exitCode == 0, "\(inspect)")
        served.setBehavior(.normal)
        let resumed = try await CLIProcess.run(["resume", tokenURL.path, "-q"], in: directory)
        #expect(resumed.exitCode == 0, "\(resumed)")
        #expect(served.ranges.last == "bytes=100000-", "\(served.ranges)")
    }

    @Test("get -o into a directory whose name holds a tab: success (exit 0) leaves no token file behind")
    func tabInDestinationLeavesNoTokenAfterSuccess() async throws {
        let served = try ServedFile()
        let scratch = try ScratchDirectory()
        let directory = try scratch.subdirectory(Self.tabbedName)
        let result = try await CLIProcess.run(["get", served.url, "-o", directory.path + "/", "-q"], in: scratch.url)
        try #require(result.exitCode == 0, "\(result)")
        try expectSameBytes(Data(contentsOf: directory.appendingPathComponent("file.bin")), served.bytes)
        let leftovers = scratch.contents(of: directory).filter { $0.hasSuffix(".resumable.json") }
        #expect(leftovers.isEmpty, "the token is removed on success, but \(leftovers) are left")
    }

    @Test("a download into a directory whose name holds a tab writes one token file, not a new one per checkpoint")
    func tabInDestinationDoesNotMultiplyTokens() async throws {
        let served = try ServedFile(length: 4 << 20)
        let gate = served.holdBody(after: 64 * 1024)
        let scratch = try ScratchDirectory()
        let directory = try scratch.subdirectory(Self.tabbedName)
        let process = try await CLIProcess.start(["get", served.url, "-q"], in: directory)
        let tokenNames = { @Sendable in
            ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? [])
                .filter { $0.hasSuffix(".resumable.json") }
        }
        // Checkpoints come once a second while bytes arrive: let bytes go by until three token files exist, or the
        // first checkpoint's file has been rewritten at least three times (one file: the expected behaviour).
        let offsets = Mutex<Set<Int64>>([])
        _ = try await trickle(gate, bodyLength: served.length, timeout: .seconds(30)) {
            if let offset = tokenOffset(at: directory.appendingPathComponent("file.bin.resumable.json")) {
                offsets.withLock { _ = $0.insert(offset) }
            }
            return tokenNames().count >= 3 || offsets.withLock { $0.count } >= 3
        }
        let names = tokenNames()
        process.send(SIGINT)
        let result = try await process.finish()
        gate.open()
        #expect(result.exitCode == 130, "\(result)")
        // Each checkpoint found the previous one unreadable and took the next number: after about 1000 seconds
        // (`TokenFile`'s limit of 1000 numbers) the download stops with an error.
        #expect(names.count <= 1, "one token file per checkpoint: \(names.sorted())")
    }

    @Test("get -i into an output directory whose name holds a tab: resume --state continues what the batch left")
    func tabInBatchOutputKeepsTheBatchResumable() async throws {
        let served = try ServedFile(behavior: Behavior(dropAfterBytes: 100_000))
        let scratch = try ScratchDirectory()
        let list = scratch.file("list.txt")
        try Data((served.url + "\n").utf8).write(to: list)
        let output = scratch.url.appendingPathComponent(Self.tabbedName, isDirectory: true).path
        let state = output + "/.resumable-state"
        let first = try await CLIProcess.run(
            ["get", "-i", list.path, "-o", output, "--retries", "0", "-q"], in: scratch.url)
        // The batch itself says the download is left to resume (exit 75: a transient failure that kept its token).
        try #require(first.exitCode == 75, "\(first)")
        served.setBehavior(.normal)
        let resumed = try await CLIProcess.run(["resume", "--state", state, "-q"], in: scratch.url)
        #expect(resumed.exitCode == 0, "\(resumed)")
        expectSameBytes((try? Data(contentsOf: URL(fileURLWithPath: output + "/file.bin"))), served.bytes)
    }
}
