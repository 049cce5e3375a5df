import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Adversarial review of the URLSession transport's `calls` queue: `close()` returns at once, tasks are made,
/// resumed and cancelled on the queue. A request asked for around a close, or cancelled around its making, must end
/// (no continuation left unresumed) and never trap.
@Suite("URLSession transport attack: close and cancel around the making of a task")
struct URLSessionCloseAttackTests {
    static func request(_ url: URL) -> TransportRequest {
        TransportRequest(
            url: url, headers: [HTTPHeader(name: "Accept-Encoding", value: "identity")], idleTimeout: .seconds(600))
    }

    #if canImport(FoundationNetworking)
        /// Every interleaving the scheduler gives of execute's hop to `calls` with close(): each request ends. A hang
        /// shows as this test never ending (the run's timeout), a trap as a crash.
        @Test("A request racing close() always ends", arguments: [0, 1, 2])
        func requestRacingCloseEnds(yields: Int) async throws {
            let server = try LoopbackServer()
            server.register(.generated(length: 1 << 20, seed: 7), at: "/f")
            for _ in 0..<60 {
                let transport = URLSessionTransport()
                let consumer = GatedConsumer(blockingAt: -1, on: Latch(), keepsBytes: false)
                let request = Task {
                    try await transport.execute(Self.request(server.url(for: "/f")), consumer: consumer)
                }
                for _ in 0..<yields { await Task.yield() }
                transport.close()
                _ = await request.result
                // After close: refused at once.
                let after = Task {
                    try await transport.execute(Self.request(server.url(for: "/f")), consumer: consumer)
                }
                await #expect(throws: ResumableError.self) { try await after.value }
            }
        }

        /// A request cancelled while its task is being made on `calls` ends with a cancellation.
        @Test("A request cancelled around the making of its task ends", arguments: [0, 1, 2])
        func requestCancelledWhileMadeEnds(yields: Int) async throws {
            let server = try LoopbackServer()
            server.register(.generated(length: 4 << 20, seed: 8), at: "/f")
            let transport = URLSessionTransport()
            defer { transport.close() }
            for _ in 0..<60 {
                let consumer = GatedConsumer(blockingAt: -1, on: Latch(), keepsBytes: false)
                let request = Task {
                    try await transport.execute(Self.request(server.url(for: "/f")), consumer: consumer)
                }
                for _ in 0..<yields { await Task.yield() }
                request.cancel()
                _ = await request.result
            }
        }
    #endif
}
