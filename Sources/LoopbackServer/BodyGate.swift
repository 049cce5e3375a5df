import Synchronization

/// Holds response bodies at a byte count until the test lets them go on: a "mid-transfer" that does not depend
/// on timing.
///
/// Set a gate on ``Behavior/gate``. Every response served with that behavior sends its head and the first
/// ``limit`` bytes of its body, then waits — for as long as it takes — until the test moves the limit
/// (``advance(by:)``) or opens the gate (``open()``), the client closes the connection, or the server shuts down.
/// As for ``Behavior/dropAfterBytes``, the count is of the body bytes of each response (payload bytes for a chunked
/// one), starting at 0 for every response; a gate with a limit of 0 holds a response right after its head.
///
/// ```swift
/// let gate = BodyGate(holdingAfter: 100_000)
/// server.register(.generated(length: 1 << 20, seed: 1, behavior: Behavior(gate: gate)), at: "/file.bin")
/// // … start a download …
/// #expect(await gate.waitUntilHeld())  // 100 000 bytes sent, and no more until:
/// gate.open()
/// ```
///
/// A held response notices within about 10 ms that the gate moved or that its client went away.
public final class BodyGate: Sendable, Hashable, CustomStringConvertible {
    private struct State {
        /// How many body bytes a response may send; `nil` once the gate is open.
        var limit: Int64?
        /// The responses waiting at the gate now.
        var held = 0
        /// How many times a response stopped at the gate.
        var arrivals = 0
    }

    private let state: Mutex<State>

    /// A closed gate: responses stop after `bytes` body bytes.
    ///
    /// - Parameter bytes: The body bytes each response sends before it waits (0 or more).
    public init(holdingAfter bytes: Int64) {
        state = Mutex(State(limit: max(0, bytes)))
    }

    /// The body bytes a response may send before it waits; `nil` when the gate is open.
    public var limit: Int64? { state.withLock { $0.limit } }

    /// How many responses are waiting at the gate now.
    public var heldCount: Int { state.withLock { $0.held } }

    /// How many times, in all, a response stopped at the gate (one response stops again at each new limit it
    /// reaches).
    public var arrivals: Int { state.withLock { $0.arrivals } }

    /// Lets every response, held now or later, send the rest of its body.
    public func open() {
        state.withLock { $0.limit = nil }
    }

    /// Moves the limit `bytes` further, so held responses send that many more bytes and stop again.
    ///
    /// - Parameter bytes: How far to move the limit; an open gate stays open.
    public func advance(by bytes: Int64) {
        state.withLock { state in
            if let limit = state.limit { state.limit = limit + max(0, bytes) }
        }
    }

    /// Waits until at least `count` responses are held at the gate at the same time.
    ///
    /// Polls every 5 ms on `Task.sleep`, so it never blocks a thread.
    ///
    /// - Parameters:
    ///   - count: How many held responses to wait for.
    ///   - timeout: The longest wait; generous by default, as a wait here only ends early on a real failure.
    /// - Returns: `true` once they are held; `false` on timeout or cancellation.
    public func waitUntilHeld(count: Int = 1, timeout: Duration = .seconds(120)) async -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while true {
            if heldCount >= count { return true }
            if clock.now >= deadline || Task.isCancelled { return false }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    public var description: String {
        let (limit, held, arrivals) = state.withLock { ($0.limit, $0.held, $0.arrivals) }
        return "BodyGate(limit: \(limit.map(String.init) ?? "open"), held: \(held), arrivals: \(arrivals))"
    }

    public static func == (left: BodyGate, right: BodyGate) -> Bool {
        left === right
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(ObjectIdentifier(self))
    }

    // MARK: - Used by the response writer

    /// How many more body bytes a response that has sent `sent` may send now: `nil` when the gate is open,
    /// else 0 or more.
    func room(after sent: Int64) -> Int64? {
        state.withLock { state in state.limit.map { max(0, $0 - sent) } }
    }

    /// Counts a response as held.
    func arrive() {
        state.withLock { state in
            state.held += 1
            state.arrivals += 1
        }
    }

    /// Counts a held response as gone on (or gone).
    func leave() {
        state.withLock { $0.held -= 1 }
    }
}
