import Foundation
import LoopbackServer
import Resumable

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension ServedFile {
    /// Serves the file from now on with its body held after `bytes` bytes (of each response), and returns the
    /// gate that lets it go on.
    func holdBody(after bytes: Int64) -> BodyGate {
        let gate = BodyGate(holdingAfter: bytes)
        setBehavior(Behavior(gate: gate))
        return gate
    }
}

/// Lets a held body go on in small steps until `condition` holds: for what the CLI only does while bytes arrive,
/// such as a periodic checkpoint (every second). The limit never passes `bodyLength - 1`, so the download cannot
/// finish meanwhile.
///
/// A step is taken at most every 20 ms, and only while the server holds a response at the limit, so the bytes go
/// by at the pace of the client. The steps are taken on a thread of its own: the cooperative pool, which CPU-heavy
/// tests can keep busy for many seconds in a parallel run, would starve them. How many bytes go by before
/// `condition` holds does not matter.
///
/// - Returns: Whether `condition` came true within `timeout`.
func trickle(
    _ gate: BodyGate, bodyLength: Int64, step: Int64 = 8 * 1024, timeout: Duration = CLIProcess.deadline,
    until condition: @escaping @Sendable () -> Bool
) async throws -> Bool {
    await withCheckedContinuation { continuation in
        let thread = Thread {
            let clock = ContinuousClock()
            let deadline = clock.now + timeout
            while clock.now < deadline {
                if condition() { return continuation.resume(returning: true) }
                if gate.heldCount > 0, let limit = gate.limit, limit + step < bodyLength { gate.advance(by: step) }
                usleep(20_000)
            }
            continuation.resume(returning: condition())
        }
        thread.name = "trickle"
        thread.start()
    }
}

/// The offset of the token file at `url`, or `nil` when there is none (yet) or it cannot be read.
func tokenOffset(at url: URL) -> Int64? {
    (try? ResumeToken(contentsOf: url))?.offset
}
