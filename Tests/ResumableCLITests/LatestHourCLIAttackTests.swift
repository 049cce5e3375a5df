import Foundation
import LoopbackServer
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Adversarial review, through the real binary, of the last hour's changes (the store's `claims` file, 58f68bb).
@Suite("The last hour's changes under attack: the command line")
struct LatestHourCLIAttackTests {
    /// Rule broken: no hangs (rule 4); a crafted store file never hangs the process (rule 3). `docs/task-store.md`:
    /// "a file over 64 MiB or one that is not a regular file is ignored".
    ///
    /// Sequence: `state/` is a valid store (mode 0700, yours) whose `claims` is a FIFO. `resumable get -i list.txt
    /// -o out/ --state state -q` with one 10 kB URL.
    ///
    /// Observed: the process never exits (killed after 30 s): the download's finish calls
    /// `TaskStore.recordClaim`, whose `open(claims, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW)` has no
    /// `O_NONBLOCK` and blocks until a reader opens the FIFO. Nothing reaches `out/`.
    @Test("get -i with a store whose claims file is a FIFO finishes instead of hanging")
    func claimsFIFOHangsBatch() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let bytes = Resource.generatedBytes(seed: 4310, range: 0..<10_000)
        server.register(.bytes(bytes), at: "/a.bin")
        try Data((server.url(for: "/a.bin").absoluteString + "\n").utf8).write(to: scratch.file("list.txt"))
        let state = scratch.url.appendingPathComponent("state")
        try #require(mkdir(state.path, 0o700) == 0)
        try #require(mkfifo(state.appendingPathComponent("claims").path, 0o600) == 0)

        let result = try await CLIProcess.run(
            ["get", "-i", "list.txt", "-o", "out/", "--state", "state", "-q"], in: scratch.url)
        #expect(result.exitCode == 0, "\(result)")
        #expect(
            (try? Data(contentsOf: scratch.url.appendingPathComponent("out/a.bin"))) == Data(bytes),
            "\(scratch.contents(of: scratch.url.appendingPathComponent("out")))")
    }
}
