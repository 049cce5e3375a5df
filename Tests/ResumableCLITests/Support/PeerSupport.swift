import Foundation

// What the peer helpers shared with ResumableTests (NginxPeer.swift, PeerProcess.swift, TLSCertificates.swift,
// TemporaryDirectory.swift, linked here) need from that target's Support/Waiting.swift, which depends on the library's
// internals and so cannot be linked.

/// How long the peer helpers wait for something that happens promptly when nothing is wrong.
enum Waiting {
    static let deadline: Duration = CLIProcess.deadline
}

/// Runs blocking `work` on a thread of its own, so no thread of the cooperative pool waits meanwhile.
func onOwnThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            continuation.resume(with: Result { try work() })
        }
        thread.name = "test blocking work"
        thread.start()
    }
}
