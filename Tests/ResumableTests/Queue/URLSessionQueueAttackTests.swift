import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Adversarial review of ``DownloadQueue`` on the URLSession transport, whose cancels now go through a fence and
/// whose `close()` ends with `finishTasksAndInvalidate()`: storms of control calls, rate limits, pauses while the
/// consumer is blocked, a released queue, and a restore from the same store afterwards.
@Suite("Queue attack on the URLSession transport: storms, rate limits, restores", .serialized)
struct URLSessionQueueAttackTests {

    /// Threads of this process now.
    static func threadCount() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? 0
    }

    final class WeakBox: @unchecked Sendable {
        weak var object: AnyObject?
        init(_ object: AnyObject?) { self.object = object }
    }

    /// Waits for `queue` to be idle, at most `timeout`; `nil` when it never was (a hang).
    static func idle(_ queue: DownloadQueue, timeout: Duration) async throws -> DownloadQueue.Summary? {
        let result = Mutex<DownloadQueue.Summary?>(nil)
        let waiter = Task {
            let summary = await queue.waitUntilIdle()
            result.withLock { $0 = summary }
        }
        _ = waiter
        _ = try await waitUntil(timeout: timeout) { result.withLock { $0 } != nil }
        return result.withLock { $0 }
    }

    static func configuration(limiter: RateLimiter? = nil, retries: Int = 2) -> DownloadTask.Configuration {
        var configuration = DownloadFixture.configuration(retries: retries, transport: .urlSession)
        configuration.connections = .single
        if let limiter { configuration.rateLimiters = [limiter] }
        return configuration
    }

    /// The files the storm downloads: what each is, and every content it may end with.
    struct Served {
        var path: String
        var versions: [[UInt8]]
        var missing: Bool
    }

    /// Downloads of small and medium files (some dropped mid-body, some missing, some changed while the storm runs)
    /// under a storm of pauses, resumes, cancels, suspends, reorderings, priority and limit changes and rate changes,
    /// fired at seeded random moments; then the queue is suspended and released, and a new queue restores the store
    /// and finishes what is left. Every file is exactly one version of the server's, the first queue's event stream
    /// ends, its store records are never left "running", and the processes' threads come back.
    @Test(
        "A storm of control calls on a URLSession queue, then a restore: every file exact, nothing stuck",
        arguments: [
            UInt64(1), 2, 3,
        ])
    func storm(seed: UInt64) async throws {
        // Seeded (Support/HostileValues.swift), so that a failing storm can be replayed (the seed is in every message).
        var random = SplitMix64(seed: seed)
        let fixture = try DownloadFixture(transport: .urlSession, keepAlive: true)
        defer { fixture.server.shutdown() }
        let threadsBefore = Self.threadCount()
        let count = 150
        var served: [Served] = []
        for index in 0..<count {
            let length = Int.random(in: 1_000...(index % 10 == 0 ? 1 << 20 : 200_000), using: &random)
            let bytes = testBytes(count: length, seed: seed &* 1000 &+ UInt64(index))
            let path = "/file-\(index).bin"
            let roll = Int.random(in: 0..<100, using: &random)
            if roll < 8 {
                fixture.server.register(.bytes(bytes, behavior: Behavior(status: 404)), at: path)
                served.append(Served(path: path, versions: [], missing: true))
                continue
            }
            fixture.serve(.bytes(bytes), at: path)
            if roll < 20 {
                var drop = Behavior()
                drop.dropAfterBytes = Int64(length / 2)
                fixture.server.enqueue(behavior: drop, for: path)
            }
            served.append(Served(path: path, versions: [bytes], missing: false))
        }
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let state = fixture.directory.url.appendingPathComponent("state")
        let limiter = RateLimiter(bytesPerSecond: 6 << 20)

        var queue: DownloadQueue? = DownloadQueue(
            configuration: .init(maximumConcurrentDownloads: 8, download: Self.configuration(limiter: limiter)),
            store: try TaskStore(directory: state))
        let weakQueue = WeakBox(queue)
        let events = await queue!.events()
        let streamEnded = Mutex(false)
        let running = Mutex(Set<DownloadQueue.TaskID>())
        let watcher = Task {
            for await event in events {
                switch event {
                case .started(let id): running.withLock { _ = $0.insert(id) }
                case .paused(let id), .finished(let id, _), .failed(let id, _), .cancelled(let id):
                    running.withLock { _ = $0.remove(id) }
                default: break
                }
            }
            streamEnded.withLock { $0 = true }
        }
        _ = watcher
        let (ids, failure) = await queue!.add(
            contentsOf: served.map {
                DownloadQueue.Addition(fixture.server.url(for: $0.path), destination: .directory(output))
            })
        try #require(failure == nil)
        var cancelled = Set<Int>()

        // The storm.
        let clock = ContinuousClock()
        let end = clock.now + .seconds(3)
        var suspended = false
        var changed = false
        while clock.now < end {
            try await Task.sleep(for: .microseconds(Int.random(in: 200...8_000, using: &random)))
            let index = Int.random(in: 0..<count, using: &random)
            let id = ids[index]
            let q = queue!
            switch Int.random(in: 0..<100, using: &random) {
            case 0..<30: await q.pause(id)
            case 30..<55: await q.resume(id)
            case 55..<58:
                await q.cancel(id)
                cancelled.insert(index)
            case 58..<68: await q.setPriority(id, Int.random(in: -3...3, using: &random))
            case 68..<76: await q.moveToFront(id)
            case 76..<82:
                if suspended { await q.unsuspend() } else { await q.suspend() }
                suspended.toggle()
            case 82..<86:
                let limit = Int.random(in: 1...10, using: &random)
                await q.setLimits(maximumConcurrentDownloads: limit)
            case 86..<90:
                limiter.bytesPerSecond = [nil, 256 << 10, 2 << 20, 8 << 20].randomElement(using: &random)!
            case 90..<92: await q.pauseAll()
            case 92..<96: await q.resumeAll()
            default:
                // A file changes on the server while downloads of it may be paused.
                if !changed || Bool.random(using: &random), !served[index].missing {
                    changed = true
                    let length = Int.random(in: 1_000...150_000, using: &random)
                    let bytes = testBytes(count: length, seed: seed &* 7919 &+ UInt64(index) &+ 1_000_000)
                    served[index].versions.append(bytes)
                    fixture.server.register(.bytes(bytes), at: served[index].path)
                }
            }
        }
        // Interrupted: as the CLI does on SIGINT.
        await queue!.setLimits(maximumConcurrentDownloads: 8)
        await queue!.suspend()
        let first = try await Self.idle(queue!, timeout: Waiting.deadline)
        #expect(first != nil, "seed \(seed): the suspended queue never became idle: \(running.withLock { $0 })")
        let stuck = await queue!.items.filter {
            if case .running = $0.state { return true }
            return false
        }
        #expect(stuck.isEmpty, "seed \(seed): running after the suspended queue was idle: \(stuck.map(\.id))")
        queue = nil
        let released = try await waitUntil { weakQueue.object == nil }
        #expect(released, "seed \(seed): the queue was never released")
        let ended = try await waitUntil { streamEnded.withLock { $0 } }
        #expect(ended, "seed \(seed): the released queue's event stream never ended")

        // A new process: the same store, restored, everything resumed.
        let listing = TaskStore.listing(directory: state)
        #expect(listing.problems.isEmpty, "seed \(seed): \(listing.problems)")
        let store = try TaskStore(directory: state)
        let second = DownloadQueue(
            configuration: .init(maximumConcurrentDownloads: 8, download: Self.configuration()), store: store)
        let problems = await second.restore()
        #expect(problems.isEmpty, "seed \(seed): \(problems)")
        await second.resumeAll()
        let summary = try await Self.idle(second, timeout: Waiting.deadline)
        #expect(summary != nil, "seed \(seed): the restored queue never became idle")
        let left = await second.items
        let leftFailures = left.map { item -> String in
            if case .failed(let error) = item.state { return "\(item.url.lastPathComponent): \(error)" }
            return "\(item.url.lastPathComponent): \(item.state)"
        }
        // Only missing files may be left (failed for good, they are gone from the queue anyway).
        #expect(left.isEmpty, "seed \(seed): left in the restored queue: \(leftFailures.prefix(5))")

        // Every file in the output is exactly one version of its server file, under its own name.
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: output.path))
        for (index, file) in served.enumerated() {
            let name = String(file.path.dropFirst())
            let present = names.contains(name)
            if file.missing || cancelled.contains(index) {
                if present, !file.missing {
                    // Cancelled after it finished: fine, as long as it is exact.
                    let bytes = try fixture.contents(of: output.appendingPathComponent(name))
                    #expect(file.versions.contains(bytes), "seed \(seed): \(name) is not the server's")
                }
                #expect(!present || !file.missing, "seed \(seed): a file for the missing \(name)")
                continue
            }
            #expect(present, "seed \(seed): \(name) never finished")
            if present {
                let bytes = try fixture.contents(of: output.appendingPathComponent(name))
                #expect(
                    file.versions.contains(bytes),
                    "seed \(seed): \(name) holds \(bytes.count) bytes, none of the server's \(file.versions.map(\.count))"
                )
            }
        }
        let expectedNames = Set(served.map { String($0.path.dropFirst()) })
        let strays = names.subtracting(expectedNames)
        #expect(strays.isEmpty, "seed \(seed): unexpected files in the output: \(strays.sorted().prefix(5))")
        let partial = ((try? FileManager.default.contentsOfDirectory(atPath: store.partialPath)) ?? []).filter {
            TemporaryFileName.isValid($0)
        }
        #expect(partial.isEmpty, "seed \(seed): temporary files left: \(partial.count)")
        let threadsSettled = try await waitUntil { Self.threadCount() <= threadsBefore + 12 }
        #expect(threadsSettled, "seed \(seed): threads \(threadsBefore) before, \(Self.threadCount()) after")
    }

    /// A queue released while its downloads run closes its shared session: the downloads end, keep their bytes in
    /// the store, and let go of it, so that a new queue can open the store and continue them. A download whose
    /// delivery thread waits in a rate limiter is not stopped by the closing (the limiter's wait ends only on a stop
    /// of the download, a pause or cancel): it waits out its turn, holding the store, and the closed session's
    /// `abandon()` on the transport's queue waits with it.
    @Test(
        "A queue released while its downloads wait in a rate limiter lets go of its store within seconds",
        arguments: [TransportKind.urlSession, .libcurl])
    func releasedWhileRateLimited(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport, keepAlive: true)
        defer { fixture.server.shutdown() }
        let length = 1 << 20
        let files = (0..<4).map { index -> [UInt8] in
            let bytes = testBytes(count: length, seed: 40 + UInt64(index))
            fixture.serve(.bytes(bytes), at: "/slow-\(index).bin")
            return bytes
        }
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let state = fixture.directory.url.appendingPathComponent("state")
        // 2000 bytes a second for all four: each 16 KiB piece after the burst waits about 8 s, behind the others'.
        let limiter = RateLimiter(bytesPerSecond: 2_000)
        var download = Self.configuration(limiter: limiter)
        download.transport = transport
        var queue: DownloadQueue? = DownloadQueue(
            configuration: .init(maximumConcurrentDownloads: 4, download: download),
            store: try TaskStore(directory: state))
        let weakQueue = WeakBox(queue)
        for index in 0..<4 {
            try await queue!.add(fixture.server.url(for: "/slow-\(index).bin"), destination: .directory(output))
        }
        let waiting = try await waitUntil { limiter.waitingCount >= 2 }
        try #require(waiting, "the downloads never waited in the limiter")
        queue = nil
        let released = try await waitUntil { weakQueue.object == nil }
        try #require(released, "the queue was never released")

        let started = ContinuousClock.now
        let store = try await reopenedStore(at: state, timeout: .seconds(10))
        try #require(
            store != nil,
            "\(transport): 10 s after its queue was released, the store is still held (limiter waiters: \(limiter.waitingCount))"
        )
        let waited = ContinuousClock.now - started
        limiter.bytesPerSecond = nil
        let second = DownloadQueue(
            configuration: .init(maximumConcurrentDownloads: 4, download: Self.configuration()), store: store)
        #expect(await second.restore().isEmpty)
        await second.resumeAll()
        let summary = try await Self.idle(second, timeout: Waiting.deadline)
        #expect(summary?.finished == 4, "\(String(describing: summary)), store reopened after \(waited)")
        for (index, bytes) in files.enumerated() {
            let url = output.appendingPathComponent("slow-\(index).bin")
            expectSameBytes((try? fixture.contents(of: url)), bytes, "slow-\(index).bin")
        }
    }

    /// Control for ``releasedWhileRateLimited(transport:)``: the same downloads held by the server (no limiter)
    /// when their queue is released end at once, and a new queue continues them from their bytes.
    @Test(
        "A queue released while its downloads are held by the server lets go of its store at once",
        arguments: [TransportKind.urlSession, .libcurl])
    func releasedWhileHeld(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport, keepAlive: true)
        defer { fixture.server.shutdown() }
        let length = 1 << 20
        let gate = BodyGate(holdingAfter: 100_000)
        let files = (0..<4).map { index -> [UInt8] in
            let bytes = testBytes(count: length, seed: 50 + UInt64(index))
            fixture.serve(.bytes(bytes), at: "/held-\(index).bin")
            fixture.server.enqueue(behavior: Behavior(gate: gate), for: "/held-\(index).bin")
            return bytes
        }
        defer { gate.open() }
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let state = fixture.directory.url.appendingPathComponent("state")
        var download = Self.configuration()
        download.transport = transport
        var queue: DownloadQueue? = DownloadQueue(
            configuration: .init(maximumConcurrentDownloads: 4, download: download),
            store: try TaskStore(directory: state))
        let weakQueue = WeakBox(queue)
        let partial = state.appendingPathComponent("partial").path
        for index in 0..<4 {
            try await queue!.add(fixture.server.url(for: "/held-\(index).bin"), destination: .directory(output))
        }
        try #require(await gate.waitUntilHeld(count: 4, timeout: Waiting.deadline), "\(gate)")
        try #require(try await waitUntilTemporaryFiles(in: partial, count: 4, eachHolding: 100_000))
        queue = nil
        let released = try await waitUntil { weakQueue.object == nil }
        try #require(released, "the queue was never released")
        let store = try await reopenedStore(at: state, timeout: .seconds(10))
        try #require(store != nil, "\(transport): 10 s after its queue was released, the store is still held")
        let second = DownloadQueue(
            configuration: .init(maximumConcurrentDownloads: 4, download: Self.configuration()), store: store)
        #expect(await second.restore().isEmpty)
        await second.resumeAll()
        let summary = try await Self.idle(second, timeout: Waiting.deadline)
        #expect(summary?.finished == 4, "\(String(describing: summary))")
        for (index, bytes) in files.enumerated() {
            let url = output.appendingPathComponent("held-\(index).bin")
            expectSameBytes((try? fixture.contents(of: url)), bytes, "held-\(index).bin")
            #expect(
                fixture.ranges("/held-\(index).bin").last == "bytes=100000-", "\(fixture.ranges("/held-\(index).bin"))")
        }
    }
}
