import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// FoundationNetworking's `URLSessionTask.cancel()` reports its failure on the session's work queue a moment after it
/// marks the task cancelling. If the task's completion runs on the delegate queue in that moment, it takes the task
/// out of the session's registry first, and the failure report traps the process ("Trying to access a behaviour for a
/// task that in not in the registry"). These tests cancel, and close the transport, at the moment each response ends:
/// the consumer asks for it while it takes the last byte, so the cancellation races the completion that follows.
@Suite("URLSession transport: a cancel or close racing a request's completion never traps")
struct URLSessionCompletionRaceTests {
    #if canImport(FoundationNetworking)
        /// Calls `atEnd` on the delivery thread when the last byte of a body of `length` arrives.
        final class EndTrigger: ResponseConsumer, @unchecked Sendable {
            // @unchecked: `received` is only touched on the transport's serial delivery queue.
            private var received = 0
            private let length: Int
            private let atEnd: @Sendable () -> Void

            init(length: Int, atEnd: @escaping @Sendable () -> Void) {
                self.length = length
                self.atEnd = atEnd
            }

            func receive(_ head: ResponseHead) -> Bool { true }

            func receive(_ body: UnsafeRawBufferPointer) throws(ResumableError) {
                received += body.count
                if received == length { atEnd() }
            }
        }

        static let length = 2048
        /// Requests at once, and one after the other in each: enough to trap the process most runs without the fence.
        static let lanes = 4
        static let rounds = 400

        static func request(_ url: URL) -> TransportRequest {
            TransportRequest(
                url: url, headers: [HTTPHeader(name: "Accept-Encoding", value: "identity")], idleTimeout: .seconds(60))
        }

        /// The fence needs FoundationNetworking's work queue; should a later FoundationNetworking rename it, cancels are
        /// plain `cancel()`s again, and this says so.
        @Test("The fence finds the session's work queue")
        func fenceFindsWorkQueue() {
            let session = URLSession(configuration: .ephemeral)
            defer { session.finishTasksAndInvalidate() }
            #expect(URLSessionCancellation().attach(to: session))
        }

        /// The calling task is cancelled when the last byte arrives: `task.cancel()` meets the completion.
        @Test("Cancelling a request as its body ends never traps")
        func cancelAsBodyEnds() async throws {
            let server = try LoopbackServer()
            server.register(.generated(length: Int64(Self.length), seed: 3), at: "/f")
            let transport = URLSessionTransport()
            defer { transport.close() }
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<Self.lanes {
                    group.addTask {
                        for _ in 0..<Self.rounds {
                            let holder = Mutex<Task<Void, any Error>?>(nil)
                            let consumer = EndTrigger(length: Self.length) { holder.withLock { $0?.cancel() } }
                            let request = Task {
                                try await transport.execute(Self.request(server.url(for: "/f")), consumer: consumer)
                            }
                            holder.withLock { $0 = request }
                            // The request ends either way (one cancelled after its last byte is reported as
                            // cancelled); a trap ends the process.
                            _ = await request.result
                        }
                    }
                }
            }
        }

        /// The transport is closed when the last byte arrives: `invalidateAndCancel()` meets the completion.
        @Test("Closing the transport as a body ends never traps")
        func closeAsBodyEnds() async throws {
            let server = try LoopbackServer()
            server.register(.generated(length: Int64(Self.length), seed: 4), at: "/f")
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<Self.lanes {
                    group.addTask {
                        for _ in 0..<Self.rounds {
                            let transport = URLSessionTransport()
                            let consumer = EndTrigger(length: Self.length) { transport.close() }
                            _ = try? await transport.execute(Self.request(server.url(for: "/f")), consumer: consumer)
                        }
                    }
                }
            }
        }
    #endif
}
