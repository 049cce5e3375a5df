import Foundation
import LoopbackServer

/// Blocking clients run in parallel, each on a thread of its own.
///
/// The raw client blocks in `recv`; on the cooperative pool (as many threads as cores) only a few such calls
/// would run at once, and a test waiting for sixteen requests to be held at a gate would wait forever.
enum ParallelClients {
    /// Runs blocking `work` on a new thread and awaits its result.
    static func onThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread { continuation.resume(with: Result { try work() }) }
            thread.name = "LoopbackServerTests.client"
            thread.start()
        }
    }

    /// A response with the moment its last byte arrived (the server closed the connection).
    struct Timed: Sendable {
        var response: RawResponse
        var finished: ContinuousClock.Instant
    }

    /// Starts a GET of `path` with `headers` on a thread of its own; the task ends with the whole response.
    ///
    /// Reads wait up to two minutes: a response may be held at a gate for as long as the test takes.
    static func start(port: UInt16, path: String, headers: [(String, String)] = []) -> Task<Timed, any Error> {
        let request = Array(RawHTTPClient.requestText(path: path, headers: headers).utf8)
        return Task {
            try await onThread {
                let response = try RawHTTPClient.exchange(port: port, bytes: request, receiveTimeoutSeconds: 120)
                return Timed(response: response, finished: ContinuousClock.now)
            }
        }
    }

    /// Polls `condition` every 5 ms for up to 60 s, on `Task.sleep`; returns whether it came true.
    static func waitUntil(_ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return condition()
    }
}
