import Foundation
import ProcessSpawning
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("Spawned process attack: a child reaped by someone else")
struct SpawnedProcessAttackTests {
    /// Hangs (rule: no process that never exits). A child that was reaped by anyone but this value — the kernel
    /// reaps every child itself when the process ignores SIGCHLD, a disposition inherited across `exec`
    /// (`trap '' CHLD; exec resumable demo`, a daemon's children) — makes `waitid` fail with ECHILD and the
    /// reaping `waitpid` fail too: `exit()` and `waitUntilExit()` poll forever (`resumable demo` never ends), and
    /// `send(_:)` would still signal the process id, which may belong to another process by then.
    ///
    /// Here the test reaps the child itself, as the kernel would under `SIGCHLD = SIG_IGN` (the disposition is
    /// process-wide, so the test does not change it).
    @Test("exit() returns when the child was reaped elsewhere")
    func reapedElsewhere() async throws {
        let child = try SpawnedProcess(executable: URL(fileURLWithPath: "/bin/true"))
        var status: Int32 = 0
        #expect(waitpid(child.processIdentifier, &status, 0) == child.processIdentifier)
        // Without waiting: the first look finds that the child can no longer be waited for.
        #expect(child.termination == .unknown)
        #expect(!child.isRunning)
        // The blocking wait returns as well (on a thread of its own; bounded, so a regression fails, not hangs).
        let done = DispatchSemaphore(value: 0)
        Thread {
            _ = child.waitUntilExit()
            done.signal()
        }.start()
        let ended = await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: done.wait(timeout: .now() + 120) == .success) }.start()
        }
        #expect(ended, "waitUntilExit() still waits for a child that can no longer be waited for")
        #expect(await child.exit() == .unknown)
    }
}
