import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// FoundationNetworking waits for the answer to `urlSession(_:task:willPerformHTTPRedirection:newRequest:
/// completionHandler:)` in a state of its own, and its completion handler traps the process when the task has left
/// that state meanwhile ("Received callback for HTTP redirection, but we're not waiting for it",
/// `HTTPURLProtocol.swift`). A cancel (`stopLoading()`) and the request's idle timer both leave it, on the task's work
/// queue, while the delegate call waits on the delegate queue: behind a slow consumer of another request of the
/// session, for as long as that consumer takes. The URLSession transport therefore never calls that completion
/// handler (see `TaskRouter`).
///
/// Each test holds the session's delegate queue with a consumer blocked on its first chunk, lets a redirect reach
/// FoundationNetworking's waiting state behind it, ends the task there (a cancel, the idle timer), and only then lets
/// the delegate queue run. Each runs in a child process: a trap there fails the test instead of ending the test
/// process. Without the transport's workaround both children ended with SIGILL and that message, every run.
@Suite("URLSession transport: a redirect whose answer waits never traps")
struct URLSessionRedirectRaceTests {
    #if canImport(FoundationNetworking)
        /// Records the heads it is given and declines them, as the engine declines a redirect.
        final class HeadRecorder: ResponseConsumer, Sendable {
            let statuses = Mutex<[Int]>([])

            func receive(_ head: ResponseHead) -> Bool {
                statuses.withLock { $0.append(head.status) }
                return false
            }

            func receive(_ body: UnsafeRawBufferPointer) throws(ResumableError) {}
        }

        static func request(_ url: URL, idleTimeout: Duration) -> TransportRequest {
            TransportRequest(
                url: url, headers: [HTTPHeader(name: "Accept-Encoding", value: "identity")], idleTimeout: idleTimeout)
        }

        /// Holds the delegate queue of a transport's session: a request whose consumer blocks on its first chunk.
        struct HeldQueue {
            let server: LoopbackServer
            let transport: URLSessionTransport
            let latch = Latch()
            let gate = BodyGate(holdingAfter: 1000)
            let download: Task<Void, any Error>
            /// Delegate callbacks waiting once the queue is held: the blocked one.
            let baseline: Int

            init() async throws {
                server = try LoopbackServer()
                server.register(.generated(length: 100_000, seed: 76, behavior: Behavior(gate: gate)), at: "/held")
                server.register(
                    .bytes([], behavior: Behavior(redirect: Redirect(status: 302, location: "/elsewhere"))), at: "/hop")
                let transport = URLSessionTransport()
                self.transport = transport
                let consumer = GatedConsumer(blockingAt: 1, on: latch)
                let url = server.url(for: "/held")
                download = Task {
                    try await transport.execute(
                        URLSessionRedirectRaceTests.request(url, idleTimeout: .seconds(600)), consumer: consumer)
                }
                try #require(await waitUntil { consumer.state.withLock { $0.chunks } == 1 })
                try #require(await gate.waitUntilHeld())
                baseline = transport.deliveryStatistics.waiting
            }

            /// Waits until `more` callbacks than the blocked one wait on the delegate queue.
            func waitForCallbacks(_ more: Int) async throws {
                let transport = transport
                let expected = baseline + more
                try #require(
                    await waitUntil { transport.deliveryStatistics.waiting >= expected },
                    "\(transport.deliveryStatistics)")
            }

            /// Lets the delegate queue and the held body go on, and waits for the held request.
            func release() async throws {
                latch.open()
                gate.open()
                try await download.value
            }
        }

        /// The request is cancelled while FoundationNetworking waits for the redirect's answer.
        static func cancelWhileTheRedirectWaits() async throws {
            let held = try await HeldQueue()
            let recorder = HeadRecorder()
            let url = held.server.url(for: "/hop")
            let transport = held.transport
            let hop = Task {
                try await transport.execute(request(url, idleTimeout: .seconds(600)), consumer: recorder)
            }
            // The redirect's delegate call waits behind the blocked consumer.
            try await held.waitForCallbacks(1)
            hop.cancel()
            // The cancel's report of the failure waits too: FoundationNetworking has left the waiting state.
            try await held.waitForCallbacks(2)
            try await held.release()
            // Checked with `#require`: in the child process, only a thrown error fails the exit test.
            let outcome = await hop.result
            transport.close()
            var code: ResumableError.Code?
            if case .failure(let error as ResumableError) = outcome { code = error.code }
            try #require(code == .cancelled, "the cancelled request ended with \(outcome)")
            try #require(recorder.statuses.withLock { $0 }.isEmpty)
        }

        /// The request's idle timer fires while FoundationNetworking waits for the redirect's answer; `false` when it
        /// fired before the redirect arrived (a loaded machine), which tests nothing.
        static func idleTimeoutWhileTheRedirectWaits() async throws -> Bool {
            let held = try await HeldQueue()
            let recorder = HeadRecorder()
            let url = held.server.url(for: "/hop")
            let transport = held.transport
            let hop = Task {
                try await transport.execute(request(url, idleTimeout: .seconds(1)), consumer: recorder)
            }
            // The redirect's delegate call waits behind the blocked consumer (or, when the timer fired before the
            // redirect arrived, the timeout's report does).
            try await held.waitForCallbacks(1)
            // FoundationNetworking's timer fires 1 s after the redirect's last byte and reports nothing: only time tells
            // that it did.
            try await Task.sleep(for: .seconds(3))
            try await held.release()
            let outcome = await hop.result
            transport.close()
            let statuses = recorder.statuses.withLock { $0 }
            if case .failure(let error as ResumableError) = outcome, error.code == .timedOut, statuses.isEmpty {
                return false
            }
            try outcome.get()
            try #require(statuses == [302])
            return true
        }

        /// Runs ``idleTimeoutWhileTheRedirectWaits()`` until the timer fired while the redirect waited, a few times at
        /// most.
        static func idleTimeoutWhileARedirectWaits() async throws {
            for _ in 0..<5 {
                if try await idleTimeoutWhileTheRedirectWaits() { return }
            }
            try #require(Bool(false), "the idle timer fired before the redirect arrived, every time")
        }

        @Test("Cancelling a request while its redirect's answer waits for the delegate queue never traps")
        func cancelWhileRedirectWaits() async {
            await #expect(processExitsWith: .success) {
                try await URLSessionRedirectRaceTests.cancelWhileTheRedirectWaits()
            }
        }

        @Test("The idle timeout passing while a redirect's answer waits for the delegate queue never traps")
        func idleTimeoutWhileRedirectWaits() async {
            await #expect(processExitsWith: .success) {
                try await URLSessionRedirectRaceTests.idleTimeoutWhileARedirectWaits()
            }
        }
    #endif
}
