import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

@Suite("DownloadQueue: many downloads, a store that survives restarts")
struct DownloadQueueTests {
    static func serve(_ fixture: DownloadFixture, count: Int, length: Int = 64 << 10) -> [(URL, [UInt8])] {
        (0..<count).map { index in
            let bytes = testBytes(count: length + index, seed: UInt64(index + 1))
            return (fixture.serve(.bytes(bytes), at: "/file-\(index).bin"), bytes)
        }
    }

    /// What the CLI's batch relies on for its last lines: an idle queue's `finishEvents()` ends each stream after the
    /// events already sent, so a subscriber that had not read them yet still gets every one (a cancel of the reader
    /// dropped the last `task-finished` of a batch, seen once in CI).
    @Test("finishEvents() ends the streams after every event already sent, none dropped")
    func finishEventsKeepsBufferedEvents() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let files = Self.serve(fixture, count: 3, length: 4096)
        let queue = DownloadQueue(configuration: .init(download: DownloadFixture.configuration()))
        let events = await queue.events()
        var ids: Set<DownloadQueue.TaskID> = []
        for (url, _) in files { ids.insert(try await queue.add(url, destination: .directory(fixture.directory.url))) }
        let summary = await queue.waitUntilIdle()
        #expect(summary.finished == 3)
        // Nothing has read the stream yet: every event is still buffered.
        await queue.finishEvents()
        var finished: Set<DownloadQueue.TaskID> = []
        for await event in events {
            if case .finished(let id, _) = event { finished.insert(id) }
        }
        #expect(finished == ids)
    }

    /// Records how many downloads run at once, from the queue's own events.
    final class Concurrency: Sendable {
        private let state = Mutex((running: 0, peak: 0, finished: 0))
        func handle(_ event: DownloadQueue.Event) {
            state.withLock { state in
                switch event {
                case .started:
                    state.running += 1
                    state.peak = max(state.peak, state.running)
                case .finished, .failed, .cancelled, .paused:
                    state.running -= 1
                    if case .finished = event { state.finished += 1 }
                default: break
                }
            }
        }
        var peak: Int { state.withLock { $0.peak } }
    }

    @Test(
        "Twelve files, three at a time: each is exactly the server's, and never more than three run",
        arguments: TransportKind.all)
    func runsAll(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        defer { fixture.server.shutdown() }
        let files = Self.serve(fixture, count: 12)
        let queue = DownloadQueue(
            configuration: .init(
                maximumConcurrentDownloads: 3, download: fixture.applying(nil, to: DownloadFixture.configuration())))
        let concurrency = Concurrency()
        let events = await queue.events()
        let watcher = Task { for await event in events { concurrency.handle(event) } }
        for (url, _) in files { try await queue.add(url, destination: .directory(fixture.directory.url)) }
        let summary = await queue.waitUntilIdle()
        watcher.cancel()
        #expect(summary == .init(finished: 12, failed: 0, cancelled: 0, waitingForResume: 0))
        for (index, (_, bytes)) in files.enumerated() {
            #expect(
                try fixture.contents(of: fixture.directory.url.appendingPathComponent("file-\(index).bin")) == bytes)
        }
        #expect(concurrency.peak <= 3)
        #expect(fixture.temporaryFiles().isEmpty)
        #expect(await queue.items.isEmpty)
    }

    @Test("add(contentsOf:): all records on disk when it returns, in order; stops at the first that cannot be added")
    func addGroup() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let files = Self.serve(fixture, count: 4)
        let gate = BodyGate(holdingAfter: 1_000)
        for index in 0..<4 { fixture.server.enqueue(behavior: Behavior(gate: gate), for: "/file-\(index).bin") }
        let store = try TaskStore(directory: fixture.directory.url.appendingPathComponent("state"))
        let queue = DownloadQueue(
            configuration: .init(maximumConcurrentDownloads: 4, download: DownloadFixture.configuration()), store: store
        )
        var additions = files.map { DownloadQueue.Addition($0.0, destination: .directory(fixture.directory.url)) }
        // The fourth cannot be added; the fifth (file-3) is never tried.
        additions.insert(DownloadQueue.Addition(URL(string: "ftp://127.0.0.1/file.bin")!), at: 3)
        let (added, failure) = await queue.add(contentsOf: additions)
        #expect(added.count == 3)
        #expect(failure?.code == .invalidRequest)
        // The records, held mid-body: none of them can have finished yet.
        let names = try FileManager.default.contentsOfDirectory(atPath: store.tasksPath).filter {
            $0.hasSuffix(".json")
        }
        #expect(names.sorted() == added.map { "\($0).json" }.sorted())
        #expect(TaskStore.listing(directory: store.directory).items.map(\.id) == added)
        #expect(await gate.waitUntilHeld(count: 3, timeout: Waiting.deadline), "\(gate)")
        gate.open()
        let summary = await queue.waitUntilIdle()
        #expect(summary == .init(finished: 3, failed: 0, cancelled: 0, waitingForResume: 0))
        for (index, (_, bytes)) in files.enumerated().prefix(3) {
            #expect(
                try fixture.contents(of: fixture.directory.url.appendingPathComponent("file-\(index).bin")) == bytes)
        }
        #expect(fixture.server.requests(for: "/file-3.bin").isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: store.tasksPath).isEmpty)
    }

    /// Without a subscriber the queue does not forward a download's events (each would be a hop onto the queue for
    /// nobody): `items` reads the running task's progress, and a subscriber that comes later gets the events of the
    /// downloads already running.
    @Test("Nobody subscribed: items shows a running download's bytes; a later subscriber gets its events")
    func eventsOfDownloadsStartedUnobserved() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let length = 256 << 10
        let files = Self.serve(fixture, count: 1, length: length)
        let gate = BodyGate(holdingAfter: 100_000)
        fixture.server.enqueue(behavior: Behavior(gate: gate), for: "/file-0.bin")
        let queue = DownloadQueue(configuration: .init(download: DownloadFixture.configuration()))
        let id = try await queue.add(files[0].0, destination: .directory(fixture.directory.url))
        #expect(await gate.waitUntilHeld(count: 1, timeout: Waiting.deadline), "\(gate)")
        // Bytes go by until a progress event has been sent: `items` shows it though nobody subscribes.
        let seen = Mutex(false)
        async let trickled = trickle(gate, bodyLength: Int64(length)) { seen.withLock { $0 } }
        let deadline = ContinuousClock.now + Waiting.deadline
        while ContinuousClock.now < deadline, !seen.withLock({ $0 }) {
            if let item = await queue.items.first, item.bytesOnDisk > 0 {
                seen.withLock { $0 = true }
            } else {
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        #expect(try await trickled)
        let events = await queue.events()
        let received = Mutex<[DownloadEvent]>([])
        let collector = Task {
            for await event in events {
                if case .download(id, let event) = event { received.withLock { $0.append(event) } }
            }
        }
        defer { collector.cancel() }
        gate.open()
        #expect(await queue.waitUntilIdle().finished == 1)
        // The download's own `finished` may reach the subscriber after the queue's: wait for it.
        let finished = try await waitUntil {
            received.withLock { $0.contains { if case .finished = $0 { true } else { false } } }
        }
        #expect(finished, "\(received.withLock { $0 })")
        try expectSameBytes(
            fixture.contents(of: fixture.directory.url.appendingPathComponent("file-0.bin")), files[0].1)
    }

    @Test("Paused mid-transfer into the store, restored by a new queue: each file resumes with a validated range")
    func pauseRestoreResume() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let length = 256 << 10
        let files = Self.serve(fixture, count: 3, length: length)
        let gate = BodyGate(holdingAfter: 100_000)
        for index in 0..<3 { fixture.server.enqueue(behavior: Behavior(gate: gate), for: "/file-\(index).bin") }
        let stateDirectory = fixture.directory.url.appendingPathComponent("state")
        let output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        var configuration = DownloadFixture.configuration()
        configuration.checkpointing = .init(interval: .milliseconds(50)) { _ in }
        do {
            let store = try TaskStore(directory: stateDirectory)
            let queue = DownloadQueue(
                configuration: .init(maximumConcurrentDownloads: 3, download: configuration), store: store)
            for (url, _) in files { try await queue.add(url, destination: .directory(output)) }
            #expect(await gate.waitUntilHeld(count: 3, timeout: Waiting.deadline), "\(gate)")
            #expect(try await waitUntilTemporaryFiles(in: store.partialPath, count: 3, eachHolding: 100_000))
            await queue.pauseAll()
            let summary = await queue.waitUntilIdle()
            #expect(summary.waitingForResume == 3)
            for item in await queue.items {
                guard case .paused = item.state else { return #expect(Bool(false), "\(item.state)") }
                #expect(item.bytesOnDisk == 100_000)
            }
        }
        gate.open()
        // A new process: the store is opened again and the queue restored.
        let store = try TaskStore(directory: stateDirectory)
        let queue = DownloadQueue(configuration: .init(download: configuration), store: store)
        let problems = await queue.restore()
        #expect(problems.isEmpty)
        #expect(await queue.items.count == 3)
        await queue.resumeAll()
        let summary = await queue.waitUntilIdle()
        #expect(summary.finished == 3)
        for (index, (_, bytes)) in files.enumerated() {
            try expectSameBytes(fixture.contents(of: output.appendingPathComponent("file-\(index).bin")), bytes)
            let requests = fixture.server.requests(for: "/file-\(index).bin")
            #expect(requests.last?.header("Range") == "bytes=100000-")
            #expect(requests.last?.header("If-Range") != nil)
        }
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: stateDirectory.appendingPathComponent("tasks").path)
                .isEmpty)
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: stateDirectory.appendingPathComponent("partial").path)
                .isEmpty)
    }

    @Test(
        "A 404 leaves the queue as failed without a token, and no record; a cancelled waiting download leaves nothing")
    func failuresAndCancel() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let files = Self.serve(fixture, count: 2)
        let store = try TaskStore(directory: fixture.directory.url.appendingPathComponent("state"))
        let queue = DownloadQueue(
            configuration: .init(maximumConcurrentDownloads: 1, download: DownloadFixture.configuration()), store: store
        )
        let missing = try await queue.add(
            fixture.server.url(for: "/missing"), destination: .directory(fixture.directory.url))
        let waiting = try await queue.add(files[0].0, destination: .directory(fixture.directory.url), paused: true)
        let summary = await queue.waitUntilIdle()
        #expect(summary.failed == 1)
        #expect(await queue.items.map(\.id) == [waiting])
        #expect(store.record(missing) == nil)
        await queue.cancel(waiting)
        #expect(await queue.items.isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: store.tasksPath).isEmpty)
    }

    @Test(
        "keepsFailuresForGood: a 404 stays as failed (record without a token) across a restore; resumed, it starts from byte 0; cancelled, it leaves"
    )
    func failuresForGoodKept() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let stateDirectory = fixture.directory.url.appendingPathComponent("state")
        var configuration = DownloadQueue.Configuration(download: DownloadFixture.configuration())
        configuration.keepsFailuresForGood = true
        let url = fixture.server.url(for: "/late.bin")
        let id: DownloadQueue.TaskID
        do {
            let store = try TaskStore(directory: stateDirectory)
            let queue = DownloadQueue(configuration: configuration, store: store)
            id = try await queue.add(url, destination: .directory(fixture.directory.url))
            let summary = await queue.waitUntilIdle()
            #expect(summary.failed == 1)
            let items = await queue.items
            guard case .failed(let error)? = items.first?.state, items.count == 1 else {
                return #expect(Bool(false), "\(items.map(\.state))")
            }
            #expect(error.httpStatus == 404)
            #expect(error.resumeToken == nil)
            let record = try #require(store.record(id))
            #expect(record.state == .failed)
            #expect(record.token == nil)
            #expect(record.failure?.contains("404") == true, "\(String(describing: record.failure))")
        }
        // A new process: the failure comes back; the file now exists, and a resume downloads it from byte 0.
        let bytes = testBytes(count: 70_000, seed: 9)
        fixture.serve(.bytes(bytes), at: "/late.bin")
        let store = try TaskStore(directory: stateDirectory)
        let queue = DownloadQueue(configuration: configuration, store: store)
        #expect(await queue.restore().isEmpty)
        let restored = await queue.items
        guard case .failed? = restored.first?.state else {
            return #expect(Bool(false), "\(restored.map(\.state))")
        }
        await queue.resume(id)
        let summary = await queue.waitUntilIdle()
        #expect(summary.finished == 1)
        try expectSameBytes(fixture.contents(of: fixture.directory.url.appendingPathComponent("late.bin")), bytes)
        #expect(fixture.server.requests(for: "/late.bin").last?.header("Range") == nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: store.tasksPath).isEmpty)
        // Failed again, then cancelled: it leaves the store.
        let again = try await queue.add(
            fixture.server.url(for: "/missing.bin"), destination: .directory(fixture.directory.url))
        _ = await queue.waitUntilIdle()
        #expect(store.record(again)?.state == .failed)
        await queue.cancel(again)
        #expect(await queue.items.isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: store.tasksPath).isEmpty)
    }

    @Test("suspend() pauses the running downloads into the store and leaves the waiting ones queued, untouched")
    func suspendKeepsWaiting() async throws {
        let fixture = try DownloadFixture()
        defer { fixture.server.shutdown() }
        let files = Self.serve(fixture, count: 4, length: 256 << 10)
        let gate = BodyGate(holdingAfter: 50_000)
        defer { gate.open() }
        for index in 0..<2 { fixture.server.enqueue(behavior: Behavior(gate: gate), for: "/file-\(index).bin") }
        let store = try TaskStore(directory: fixture.directory.url.appendingPathComponent("state"))
        let queue = DownloadQueue(
            configuration: .init(maximumConcurrentDownloads: 2, download: DownloadFixture.configuration()), store: store
        )
        var ids: [DownloadQueue.TaskID] = []
        for (url, _) in files { ids.append(try await queue.add(url, destination: .directory(fixture.directory.url))) }
        #expect(await gate.waitUntilHeld(count: 2, timeout: Waiting.deadline), "\(gate)")
        #expect(try await waitUntilTemporaryFiles(in: store.partialPath, count: 2, eachHolding: 50_000))
        await queue.suspend()
        let summary = await queue.waitUntilIdle()
        #expect(summary.waitingForResume == 4)
        #expect(store.record(ids[0])?.state == .paused)
        #expect(store.record(ids[0])?.token?.offset == 50_000)
        #expect(store.record(ids[2])?.state == .queued)
        #expect(store.record(ids[2])?.token == nil)
        #expect(fixture.server.requests(for: "/file-2.bin").isEmpty, "nothing started while suspended")
    }

    @Test("restore() removes only unowned temporary files of ours in partial/, never another file, never one in use")
    func orphanCleanup() async throws {
        let directory = try TemporaryDirectory()
        let store = try TaskStore(directory: directory.url)
        let partial = URL(fileURLWithPath: store.partialPath)
        let orphan = partial.appendingPathComponent(TemporaryFileName.make())
        let foreign = partial.appendingPathComponent("notes.txt")
        let inUse = partial.appendingPathComponent(TemporaryFileName.make())
        for file in [orphan, foreign, inUse] { try Data("x".utf8).write(to: file) }
        let holder = open(inUse.path, O_RDONLY)
        defer { close(holder) }
        #expect(flock(holder, LOCK_EX | LOCK_NB) == 0)
        let linkTarget = directory.url.appendingPathComponent("elsewhere")
        try Data("keep".utf8).write(to: linkTarget)
        let link = partial.appendingPathComponent(TemporaryFileName.make())
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: linkTarget)
        let queue = DownloadQueue(store: store)
        await queue.restore()
        #expect(!FileManager.default.fileExists(atPath: orphan.path))
        #expect(FileManager.default.fileExists(atPath: foreign.path))
        #expect(FileManager.default.fileExists(atPath: inUse.path))
        #expect(try String(contentsOf: linkTarget, encoding: .utf8) == "keep")
    }

    @Test("A store others can write to is refused; a store in use by another queue is refused")
    func trust() throws {
        let directory = try TemporaryDirectory()
        let shared = directory.url.appendingPathComponent("shared")
        try FileManager.default.createDirectory(at: shared, withIntermediateDirectories: true)
        chmod(shared.path, 0o777)
        #expect(throws: ResumableError.self) { try TaskStore(directory: shared) }
        let mine = directory.url.appendingPathComponent("mine")
        let first = try TaskStore(directory: mine)
        let error = #expect(throws: ResumableError.self) { try TaskStore(directory: mine) }
        #expect(error?.code == .tokenInUse)
        _ = first
    }

    @Test("Hostile records are reported and left alone; valid ones restore; nothing traps")
    func hostileRecords() async throws {
        let directory = try TemporaryDirectory()
        let tasks = directory.url.appendingPathComponent("tasks")
        try FileManager.default.createDirectory(at: tasks, withIntermediateDirectories: true)
        let id = DownloadQueue.TaskID()
        func record(_ fields: [String: Any]) throws -> Data {
            var base: [String: Any] = [
                "version": 1, "id": id.description, "url": "http://127.0.0.1:9/f", "destination": "/tmp/",
                "priority": 0, "order": 0, "state": "paused",
            ]
            for (key, value) in fields { base[key] = value }
            return try JSONSerialization.data(withJSONObject: base)
        }
        let cases: [(String, Data)] = [
            ("garbage", Data("{{{".utf8)),
            ("newer", try record(["version": 2])),
            ("relative destination", try record(["destination": "relative/path"])),
            ("ftp", try record(["url": "ftp://example.com/f"])),
            ("state", try record(["state": "running"])),
            ("digest", try record(["expectedSHA256": "xyz"])),
            ("huge order", try record(["order": 1e300])),
            ("wrong name", try record([:])),
        ]
        for (name, data) in cases {
            try data.write(
                to: tasks.appendingPathComponent(
                    name == "wrong name" ? "\(DownloadQueue.TaskID()).json" : "\(name).json"))
        }
        try FileManager.default.createSymbolicLink(
            at: tasks.appendingPathComponent("\(DownloadQueue.TaskID()).json"),
            withDestinationURL: tasks.appendingPathComponent("garbage.json"))
        try record([:]).write(to: tasks.appendingPathComponent("\(id).json"))
        let store = try TaskStore(directory: directory.url)
        let queue = DownloadQueue(store: store)
        let problems = await queue.restore()
        #expect(problems.count == cases.count + 1, "\(problems)")
        #expect(problems.contains { $0.error.code == .newerTokenVersion })
        #expect(await queue.items.map(\.id) == [id])
    }
}
