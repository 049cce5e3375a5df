import Foundation
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#endif

/// Adversarial review of issue 11's changes to the queue and the task store (records written by hand, `tasks/`
/// kept open, downloads added in groups).
@Suite("Queue and task store attack (issue 11)")
struct TodayAttackTests {
    private static let url = URL(string: "http://127.0.0.1:9/f.bin")!

    /// Rule: a record written and read back equals the original, for any priority a user can give. `add` took any
    /// `Int` priority and the store wrote it, but the reader refuses a priority beyond ±2^53: after a restart the
    /// download was not restored (a `Problem`), and with it whatever it had downloaded. Now a priority counts as
    /// ±2^53 at most, in the queue and in its record alike, and `setPriority` does the same.
    @Test("A download added with priority Int.max is restored after a restart", arguments: [Int.max, Int.min])
    func extremePriorityRoundTrips(priority: Int) async throws {
        let directory = try TemporaryDirectory()
        let state = directory.url.appendingPathComponent("state")
        let store = try TaskStore(directory: state)
        let queue = DownloadQueue(store: store)
        let id = try await queue.add(
            Self.url, destination: .directory(directory.url), priority: priority, paused: true)
        // What a restart reads: the records on disk.
        let (records, problems) = store.load()
        #expect(problems.isEmpty, "\(problems.map(\.error.message))")
        #expect(records.map(\.id) == [id])
        let storable = priority > 0 ? 1 << 53 : -(1 << 53)
        #expect(records.first?.priority == storable)
        #expect(await queue.items.first?.priority == storable, "the queue orders by what the record says")
        await queue.setPriority(id, priority)
        let (again, problemsAgain) = store.load()
        #expect(problemsAgain.isEmpty && again.first?.priority == storable)
    }

    /// Rule: a record written and read back equals the original, for any destination a user can give. The writer
    /// wrote any path; the reader refuses one of 4096 characters or more: the download vanished at restart. Now
    /// `add` refuses such a path (longer than Linux's `PATH_MAX`: the final move could not succeed either).
    @Test("A destination path of 4,096 characters or more is refused when added, not lost at restart")
    func longDestinationRoundTrips() async throws {
        let directory = try TemporaryDirectory()
        let state = directory.url.appendingPathComponent("state")
        let store = try TaskStore(directory: state)
        let queue = DownloadQueue(store: store)
        let long = (0..<20).map { _ in String(repeating: "d", count: 250) }.joined(separator: "/")
        let destination = URL(fileURLWithPath: "/tmp/" + long + "/f.bin")
        await #expect(throws: ResumableError.self) {
            try await queue.add(Self.url, destination: .file(destination), paused: true)
        }
        let (records, problems) = store.load()
        #expect(problems.isEmpty && records.isEmpty, "nothing written for a download that was refused")
    }

    /// Rule: a record says something true about the disk, and a download's record is where a restart looks for
    /// it. The store opens `tasks/` once and writes relative to that descriptor: once `tasks/` is replaced (moved
    /// aside and made again, as a backup or a sync tool does while a long batch runs), every record goes into the
    /// moved-away directory, and a restart of the store finds none of them (before, each write looked the path
    /// up again).
    @Test("A record is written into the store's tasks/ directory, even after tasks/ was replaced")
    func recordLandsInCurrentTasksDirectory() async throws {
        let directory = try TemporaryDirectory()
        let state = directory.url.appendingPathComponent("state")
        let store = try TaskStore(directory: state)
        let tasks = state.appendingPathComponent("tasks").path
        #expect(rename(tasks, tasks + ".old") == 0)
        #expect(mkdir(tasks, 0o700) == 0)
        let queue = DownloadQueue(store: store)
        let id = try await queue.add(Self.url, destination: .directory(directory.url), paused: true)
        let path = (tasks as NSString).appendingPathComponent("\(id).json")
        let moved = (try? FileManager.default.contentsOfDirectory(atPath: tasks + ".old")) ?? []
        #expect(FileManager.default.fileExists(atPath: path), "record written to tasks.old: \(moved)")
        let (records, _) = store.load()
        #expect(records.map(\.id) == [id])
    }
}
