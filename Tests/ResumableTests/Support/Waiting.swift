import Foundation
import LoopbackServer
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Waiting in tests without depending on timing and without blocking Swift concurrency's threads.
///
/// The whole suite runs in parallel on the cooperative thread pool, which has one thread per core: a test that
/// blocks one of them (a `waitpid`, a sleep, a read from a pipe) stalls every other test, and a test that expects
/// something within a short time fails when the pool is busy. So tests wait for conditions, never for time, with
/// deadlines generous enough that only a real failure reaches them; and blocking work runs on a thread of its own.
enum Waiting {
    /// How long a test waits for something that happens promptly when nothing is wrong: a parallel run on a busy
    /// machine has been seen to keep a test from running for 20 s at a stretch.
    static let deadline: Duration = .seconds(120)
}

/// Polls `condition` every 10 ms (on `Task.sleep`) until it holds; `false` when `timeout` passes first.
func waitUntil(timeout: Duration = Waiting.deadline, _ condition: () throws -> Bool) async throws -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while clock.now < deadline {
        if try condition() { return true }
        try await Task.sleep(for: .milliseconds(10))
    }
    return try condition()
}

/// The task store at `state`, opened again once nothing holds it (a released queue and its downloads let it go),
/// trying until `timeout` passes; `nil` while something still holds it.
func reopenedStore(at state: URL, timeout: Duration = Waiting.deadline) async throws -> TaskStore? {
    var store: TaskStore?
    _ = try await waitUntil(timeout: timeout) {
        store = try? TaskStore(directory: state)
        return store != nil
    }
    return store
}

/// Runs blocking `work` (waiting for a process, reading a pipe) on a thread of its own and returns its result,
/// so that no thread of the cooperative pool waits meanwhile.
func onOwnThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            continuation.resume(with: Result { try work() })
        }
        thread.name = "test blocking work"
        thread.start()
    }
}

extension DownloadFixture {
    /// Serves `resource` at `path` with its body held after `bytes` bytes, and returns the gate.
    @discardableResult
    func serveHeld(_ resource: Resource, after bytes: Int64, at path: String = "/file.bin") -> BodyGate {
        let gate = BodyGate(holdingAfter: bytes)
        var resource = resource
        resource.behavior.gate = gate
        server.register(resource, at: path)
        return gate
    }

    /// The sizes of the library's temporary files in the scratch directory.
    func temporaryFileSizes() -> [Int64] {
        temporaryFiles().compactMap { name in
            let path = directory.url.appendingPathComponent(name).path
            return (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value
        }
    }

    /// Waits until the server holds a response at `gate` and a temporary file holds exactly `bytes` bytes: the
    /// download is then mid-transfer at a known offset, and stays there until the gate moves.
    func waitUntilHeld(at gate: BodyGate, withOnDisk bytes: Int64) async throws {
        try #require(await gate.waitUntilHeld(timeout: Waiting.deadline), "the server never held the body: \(gate)")
        let written = try await waitUntil { temporaryFileSizes().contains(bytes) }
        try #require(written, "no temporary file reached \(bytes) bytes: \(temporaryFileSizes())")
    }
}

/// Waits until `directory` holds `count` of the library's temporary files with `bytes` bytes each: the downloads
/// have *written* what a gate let through, not only received it (a pause before that leaves less on disk).
func waitUntilTemporaryFiles(in directory: String, count: Int, eachHolding bytes: Int64) async throws -> Bool {
    try await waitUntil {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter {
            TemporaryFileName.isValid($0)
        }
        let sizes = names.compactMap { name in
            (try? FileManager.default.attributesOfItem(atPath: (directory as NSString).appendingPathComponent(name)))?[
                .size] as? NSNumber
        }
        return sizes.count == count && sizes.allSatisfy { $0.int64Value == bytes }
    }
}

/// Lets a held body go on in small steps until `condition` holds: for what a download only does while bytes
/// arrive, such as a periodic checkpoint. The limit never passes `bodyLength - 1`, so the download cannot
/// finish meanwhile.
///
/// A step is taken at most every 20 ms, and only while the server holds a response at the limit, so the bytes go
/// by at the pace of the client. The steps are taken on a thread of its own: the cooperative pool, which CPU-heavy
/// tests can keep busy for many seconds in a parallel run, would starve them. How many bytes go by before
/// `condition` holds does not matter.
///
/// - Returns: Whether `condition` came true within `timeout`.
func trickle(
    _ gate: BodyGate, bodyLength: Int64, step: Int64 = 8 * 1024, timeout: Duration = Waiting.deadline,
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

/// The offset of the token in the task record file at `path`, if it has one.
func recordTokenOffset(_ path: String) -> Int64? {
    guard let data = FileManager.default.contents(atPath: path),
        let record = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
        let token = record["token"] as? [String: Any]
    else { return nil }
    return (token["offset"] as? NSNumber)?.int64Value
}

/// Lets a queue's held download go on 4 KiB at a time until its record at `recordFile` holds a token of at least
/// `bytes` (a checkpoint is taken only while bytes arrive); returns that token's offset, or `nil` on the deadline.
func trickleUntilRecorded(_ gate: BodyGate, recordFile: String, atLeast bytes: Int64) async throws -> Int64? {
    var recorded: Int64 = 0
    let reached = try await waitUntil {
        recorded = recordTokenOffset(recordFile) ?? 0
        if recorded >= bytes { return true }
        if gate.heldCount > 0 { gate.advance(by: 4096) }
        return false
    }
    return reached ? recorded : nil
}
