import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A directory that keeps a ``DownloadQueue``'s unfinished downloads across crashes and restarts.
///
/// Layout (see `docs/task-store.md`):
/// - `tasks/<id>.json`: one record per unfinished download (its URL, destination, priority, place, state and
///   last resume token), replaced atomically like a token file: written beside, flushed, renamed, the directory
///   flushed. A crash leaves the old record or the new one.
/// - `partial/`: the temporary files of the store's downloads. Every file there is the store's; it is where
///   ``DownloadQueue`` points ``DownloadTask/Configuration/temporaryDirectory``. Keep the store on the file
///   system of the destinations, so that a finished file is renamed into place rather than copied.
///
/// A record's token describes only bytes that are in its temporary file (it is a checkpoint: written after the
/// bytes were flushed), so a download restored after `kill -9` continues from its last checkpoint. A finished or
/// cancelled download's record is removed.
///
/// The records choose where files are written, so the store is trusted like the user's own files: the
/// directory must belong to the user and be writable by no one else (checked when it is opened, like `ssh` checks
/// `~/.ssh`), and records are read without following symbolic links.
public final class TaskStore: Sendable {
    /// The store's directory.
    public let directory: URL
    /// Set by the first ``DownloadQueue`` given this store, for the store's life: a second queue would start the
    /// first one's running downloads again, fail them as in use, and remove their records.
    private let claimedByQueue = Atomic<Bool>(false)
    let tasksPath: String
    let partialPath: String

    private struct State: Sendable {
        /// The records as last written, so a checkpoint replaces only the token.
        var records: [DownloadQueue.TaskID: TaskRecord] = [:]
        /// The records as they are on disk (written or read), to skip writing one again unchanged.
        var written: [DownloadQueue.TaskID: TaskRecord] = [:]
        /// Downloads whose checkpoints may still change their record: running ones.
        var acceptingCheckpoints: Set<DownloadQueue.TaskID> = []
        /// Temporary files a download ended with nothing to resume kept because its record still named them
        /// (``forgetToken(_:naming:)`` could not rewrite it): removed right after the record (``remove(_:flushing:)``).
        var keptTemporaryFiles: [DownloadQueue.TaskID: String] = [:]
    }

    /// The records in memory; held for bookkeeping only, never across a write to disk.
    private let state = Mutex(State())
    /// One record's writes are serialized: what is decided and written for it under its stripe happens in that
    /// order (a checkpoint arriving late never overtakes the pause that followed it), while records of different
    /// downloads are encoded and written in parallel. Taken before `state`, never while holding it.
    private let stripes: [Stripe] = (0..<32).map { _ in Stripe() }

    private final class Stripe: Sendable {
        let lock = Mutex(())
    }
    /// `lock`, held with `flock` while the store is open: one queue per store, across processes.
    private let lockDescriptor: Int32
    /// `tasks/`, open while the store is: records are written, renamed and removed relative to it, and it is
    /// flushed through it, without looking the path up again for every step.
    private let tasksDescriptor: Int32
    /// `tasks/` opened again because another directory took its place (renamed, replaced) while the store was open;
    /// the last one is current. Older descriptors stay open until the store closes: a step may be using one.
    private let reopenedTasks = Mutex<[Int32]>([])

    /// Opens the store in `directory`, creating it (mode `0700`) when it does not exist.
    ///
    /// - Throws: ``ResumableError/Code/fileSystem`` when it cannot be created or read;
    ///   ``ResumableError/Code/invalidRequest`` when it is not a directory, is not the user's, or others may write
    ///   into it (`chmod go-w` fixes that).
    public init(directory: URL) throws(ResumableError) {
        let path = directory.standardizedFileURL.path
        self.directory = URL(fileURLWithPath: path, isDirectory: true)
        self.tasksPath = (path as NSString).appendingPathComponent("tasks")
        self.partialPath = (path as NSString).appendingPathComponent("partial")
        for candidate in [path, tasksPath, partialPath] {
            if mkdir(candidate, 0o700) != 0 && errno != EEXIST {
                throw .fileSystem("creating the task store directory", path: candidate, errno: errno)
            }
            try Self.checkTrusted(candidate)
        }
        let lockPath = (path as NSString).appendingPathComponent("lock")
        let descriptor = open(lockPath, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .fileSystem("opening", path: lockPath, errno: errno) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG, status.st_uid == geteuid() else {
            close(descriptor)
            throw ResumableError(.invalidRequest, "the task store's lock '\(lockPath)' is not a regular file of yours")
        }
        // The directory checked above, not a symbolic link put in its place since.
        let tasks = open(tasksPath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard tasks >= 0 else {
            let code = errno
            close(descriptor)
            throw .fileSystem("opening the task store directory", path: tasksPath, errno: code)
        }
        // `resumable list` probes the lock for an instant with a shared lock: try a few times before giving up.
        var locked = flock(descriptor, LOCK_EX | LOCK_NB) == 0
        for _ in 0..<20 where !locked {
            usleep(5_000)
            locked = flock(descriptor, LOCK_EX | LOCK_NB) == 0
        }
        guard locked else {
            close(descriptor)
            close(tasks)
            throw ResumableError(
                .tokenInUse, "the task store '\(path)' is in use by another queue (in this or another process)")
        }
        lockDescriptor = descriptor
        tasksDescriptor = tasks
    }

    deinit {
        close(tasksDescriptor)
        for descriptor in reopenedTasks.withLock({ $0 }) { close(descriptor) }
        close(lockDescriptor)
    }

    /// The descriptor of the directory at `tasks/` now. The one held is checked against the path (device and inode)
    /// before each record is written or removed: records written relative to a `tasks/` that was moved away would
    /// be on disk where no restore looks, and the downloads lost. A directory in its place is checked as the store's
    /// directories are when it opens, then opened.
    private func currentTasks() throws(ResumableError) -> Int32 {
        let held = reopenedTasks.withLock { $0.last } ?? tasksDescriptor
        var atPath = stat()
        var opened = stat()
        if lstat(tasksPath, &atPath) == 0, fstat(held, &opened) == 0, atPath.st_dev == opened.st_dev,
            atPath.st_ino == opened.st_ino
        {
            return held
        }
        try Self.checkTrusted(tasksPath)
        let descriptor = open(tasksPath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw .fileSystem("opening the task store directory", path: tasksPath, errno: errno)
        }
        reopenedTasks.withLock { $0.append(descriptor) }
        return descriptor
    }

    private static func checkTrusted(_ path: String) throws(ResumableError) {
        var status = stat()
        guard lstat(path, &status) == 0 else {
            throw .fileSystem("inspecting the task store directory", path: path, errno: errno)
        }
        guard (status.st_mode & S_IFMT) == S_IFDIR else {
            throw ResumableError(.invalidRequest, "the task store '\(path)' is not a directory")
        }
        guard status.st_uid == geteuid() else {
            throw ResumableError(.invalidRequest, "the task store '\(path)' belongs to another user")
        }
        guard status.st_mode & 0o022 == 0 else {
            throw ResumableError(
                .invalidRequest,
                "the task store '\(path)' is writable by others, who could choose where downloads are written "
                    + "(chmod go-w fixes it)")
        }
    }

    /// Drops the record's token (its temporary file is gone); written with the next ``save(_:running:)``.
    func forgetToken(_ id: DownloadQueue.TaskID) {
        stripe(id).lock.withLock { _ in
            state.withLock { state in
                state.records[id]?.token = nil
                state.acceptingCheckpoints.remove(id)
            }
        }
    }

    /// The record as last written or read.
    func record(_ id: DownloadQueue.TaskID) -> TaskRecord? {
        state.withLock { $0.records[id] }
    }

    /// Whether the download's checkpoints update its record.
    func isRunning(_ id: DownloadQueue.TaskID) -> Bool {
        state.withLock { $0.acceptingCheckpoints.contains(id) }
    }

    private func recordPath(_ id: DownloadQueue.TaskID) -> String {
        (tasksPath as NSString).appendingPathComponent("\(id).json")
    }

    // MARK: - Writing

    private func stripe(_ id: DownloadQueue.TaskID) -> Stripe {
        stripes[Int(UInt(bitPattern: id.hashValue) % UInt(stripes.count))]
    }

    /// Writes `record` durably and lets its checkpoints update it while `running`.
    ///
    /// `keepingCheckpoint`: the record's token, checkpoint time and rate are those the store holds now, when it
    /// holds a token (`record`'s otherwise). Read under the record's stripe, so a checkpoint written between the
    /// caller's ``record(_:)`` and this call is not replaced by the older token the caller read.
    ///
    /// `flushingDirectory` false: the record is written and flushed, but `tasks/` is not; a crash may lose the
    /// record until the caller's ``flushDirectory()``, which it calls before anything relies on the record (one
    /// flush for the records of many downloads added together).
    ///
    /// `onlyIfPresent`: nothing happens unless the store holds the record (read or written, and not removed since).
    /// Checked under the record's stripe, so a ``remove(_:flushing:)`` on another thread is either before (nothing is
    /// written) or after (the record goes): a record removed because its file is in place never comes back.
    func save(
        _ record: TaskRecord, running: Bool, keepingCheckpoint: Bool = false, flushingDirectory: Bool = true,
        onlyIfPresent: Bool = false
    ) throws(ResumableError) {
        var record = record
        try stripe(record.id).lock.withLock { (_) throws(ResumableError) in
            let (unchanged, new) = state.withLock { state in
                if onlyIfPresent, state.records[record.id] == nil { return (true, false) }
                if keepingCheckpoint, let current = state.records[record.id], let token = current.token {
                    record.token = token
                    record.checkpointedAt = current.checkpointedAt
                    record.bytesPerSecond = current.bytesPerSecond
                }
                // A rate describes a running download only.
                if !running { record.bytesPerSecond = nil }
                let unchanged = state.written[record.id] == record
                state.records[record.id] = record
                if running {
                    state.acceptingCheckpoints.insert(record.id)
                } else {
                    state.acceptingCheckpoints.remove(record.id)
                }
                return (unchanged, state.written[record.id] == nil)
            }
            // The same record is already on disk (a queued download starting): no write, no fsync.
            guard !unchanged else { return }
            try write(record, creating: new, flushingDirectory: flushingDirectory)
            state.withLock { $0.written[record.id] = record }
        }
    }

    /// A running download's checkpoint: replaces its record's token, unless the download is no longer running
    /// (a pause, a failure or the end wrote the record after this checkpoint was taken). The record also gets the
    /// time and the rate since the previous checkpoint of the same temporary file, for `resumable list`.
    ///
    /// A token that covers no byte, while the record on disk has no token, is kept in memory only (the next write
    /// of the record carries it): the record on disk, without a token, says the same, that nothing is on disk yet
    /// (`docs/task-store.md`: the token is absent until a byte is on disk). This is the checkpoint every download
    /// hands over as soon as its response is accepted; for a small file, a third of its record writes.
    func checkpoint(_ id: DownloadQueue.TaskID, token: ResumeToken, now: Date = Date()) throws {
        try stripe(id).lock.withLock { (_) throws(ResumableError) in
            let record = state.withLock { state -> TaskRecord? in
                Self.apply(token, of: id, at: now, to: &state, writing: true).toWrite
            }
            guard let record else { return }
            try write(record)
            state.withLock { $0.written[id] = record }
        }
    }

    /// Drops the token of `id`'s record, a download that ended with nothing to resume in its temporary file
    /// `tempPath`, which is about to be removed: the record on disk is rewritten without it, flushed, before the file
    /// goes, so that no record ever names a removed file. A token naming another file goes too: the download started
    /// over from it (the file was lost or unusable), so it describes nothing the download will resume. The record
    /// itself stays; the queue decides what becomes of it.
    ///
    /// - Returns: false when the record on disk still names `tempPath` (the rewrite failed): keep the file then.
    func forgetToken(_ id: DownloadQueue.TaskID, naming tempPath: String) -> Bool {
        stripe(id).lock.withLock { _ -> Bool in
            var namesFile = false
            let record = state.withLock { state -> TaskRecord? in
                guard var record = state.records[id], let token = record.token else { return nil }
                namesFile = token.tempPath.utf8.elementsEqual(tempPath.utf8)
                record.token = nil
                record.checkpointedAt = nil
                record.bytesPerSecond = nil
                // Only a record on disk that names the file needs writing.
                guard state.written[id]?.token != nil else {
                    state.records[id] = record
                    return nil
                }
                return record
            }
            guard let record else { return true }
            do throws(ResumableError) {
                try write(record)
                state.withLock { state in
                    state.records[id] = record
                    state.written[id] = record
                }
                return true
            } catch {
                // A token naming another file describes nothing to resume whether or not the disk says so yet: the
                // record in memory forgets it (the next write of the record carries that), and `tempPath` may go.
                guard namesFile else {
                    state.withLock { $0.records[id] = record }
                    return true
                }
                state.withLock { $0.keptTemporaryFiles[id] = tempPath }
                return false
            }
        }
    }

    /// Whether the record's token names a temporary file the download gave up, kept only because the record could not
    /// forget it (``forgetToken(_:naming:)`` failed): that token describes nothing to resume. Not once a later run's
    /// checkpoint names another file.
    func keepsAbandonedFile(_ id: DownloadQueue.TaskID) -> Bool {
        state.withLock { state in
            guard let kept = state.keptTemporaryFiles[id], let named = state.records[id]?.token?.tempPath else {
                return false
            }
            return kept.utf8.elementsEqual(named.utf8)
        }
    }

    /// ``checkpoint(_:token:now:)`` for a checkpoint that writes nothing (a token that covers no byte over a
    /// record without one, or a download no longer running): done in memory, and true. False when the checkpoint
    /// would write the record: nothing is changed, the caller hands the token to ``checkpoint(_:token:now:)``.
    func checkpointInMemory(_ id: DownloadQueue.TaskID, token: ResumeToken, now: Date = Date()) -> Bool {
        stripe(id).lock.withLock { _ in
            state.withLock { state in Self.apply(token, of: id, at: now, to: &state, writing: false).done }
        }
    }

    /// The in-memory part of a checkpoint. `done`: the checkpoint is complete (dropped, or kept in memory only);
    /// otherwise `toWrite` is the record to write, or nil when `writing` is false (then nothing changed).
    private static func apply(
        _ token: ResumeToken, of id: DownloadQueue.TaskID, at now: Date, to state: inout State, writing: Bool
    ) -> (done: Bool, toWrite: TaskRecord?) {
        guard state.acceptingCheckpoints.contains(id), var record = state.records[id] else { return (true, nil) }
        let inMemoryOnly =
            token.coversNoByte && state.written[id] != nil
            && state.written[id]?.token == nil
        guard inMemoryOnly || writing else { return (false, nil) }
        record.bytesPerSecond = nil
        if let previous = record.token, let since = record.checkpointedAt,
            previous.tempPath.utf8.elementsEqual(token.tempPath.utf8)
        {
            let seconds = now.timeIntervalSince(since)
            // Every byte the tokens cover (a version 2 token's ranges too), as `list` shows them.
            let bytes = Double(max(token.bytesCovered - previous.bytesCovered, 0))
            if seconds > 0, seconds.isFinite {
                record.bytesPerSecond = Int64(min(bytes / seconds, Double(TaskRecord.maximumOrder)))
            }
        }
        record.checkpointedAt = now
        record.token = token
        state.records[id] = record
        return inMemoryOnly ? (true, nil) : (false, record)
    }

    /// Removes the record of a download that finished, failed or was cancelled; later checkpoints are ignored.
    ///
    /// `flushing`: `tasks/` is flushed after the removal, so that a crash cannot bring the record back. A finished
    /// download's removal is not flushed: a record that comes back finds its file moved into place, and the download
    /// is reported finished again (``restore()``); on a disk, each flush is a journal commit, one of five per file.
    func remove(_ id: DownloadQueue.TaskID, flushing: Bool = true) {
        stripe(id).lock.withLock { _ in
            // Only a record this store wrote or read is on disk (a finished download's is removed twice: when its
            // file is in place, and when the queue learns it finished).
            let (onDisk, kept) = state.withLock { state in
                state.records[id] = nil
                state.acceptingCheckpoints.remove(id)
                return (state.written.removeValue(forKey: id) != nil, state.keptTemporaryFiles.removeValue(forKey: id))
            }
            var removed = !onDisk
            if onDisk, let tasks = try? currentTasks(), unlinkat(tasks, "\(id).json", 0) == 0 {
                DurableSteps.record(.unlink, recordPath(id))
                if flushing { fsync(tasks) }
                removed = true
            }
            // The file its record named goes after the record, as the download would have removed it: with the checks
            // of any removal from `partial/` (the library's name, ours, unlocked, still the same file).
            if removed, let kept { removeUnownedTemporaryFiles(keeping: [], only: kept) }
        }
        // A download that ends after its queue was released: the last one takes the names along.
        if queueReleased.load(ordering: .sequentiallyConsistent) { removeClaimsIfNothingIsLeft() }
    }

    // MARK: - A list being added

    /// `adding`: present while a list of downloads is being added to a suspended queue (the CLI's `get -i`), before
    /// any of them starts. A store that holds it after a crash has records of an incomplete list and no byte of any
    /// of them: they may be dropped (restored and cancelled) and the whole list added again.
    private var addingPath: String { Self.addingPath(in: directory) }

    private static func addingPath(in directory: URL) -> String {
        (directory.path as NSString).appendingPathComponent("adding")
    }

    /// Whether a list was being added when the process that added it ended (`adding` is there).
    ///
    /// - Throws: ``ResumableError/Code/invalidRequest`` when `adding` is there but is not a regular file: the store
    ///   was tampered with, and nothing about its records can be assumed.
    package func additionWasInterrupted() throws(ResumableError) -> Bool {
        var status = stat()
        guard lstat(addingPath, &status) == 0 else {
            if errno == ENOENT { return false }
            throw ResumableError(
                .invalidRequest, "cannot examine \(addingPath): \(String(cString: strerror(errno)))")
        }
        guard (status.st_mode & S_IFMT) == S_IFREG else {
            throw ResumableError(
                .invalidRequest, "\(addingPath) is not a regular file: this state directory was not left by resumable")
        }
        return true
    }

    /// Whether the store at `directory` holds an `adding` mark (any kind of file), without opening the store: for a
    /// listing, which must not wait for the store's lock.
    package static func holdsAdditionMark(in directory: URL) -> Bool {
        var status = stat()
        return lstat(addingPath(in: directory), &status) == 0
    }

    /// Marks the start of a list's addition, flushed, before its first record is written.
    package func beginAddition() throws(ResumableError) {
        let descriptor = open(addingPath, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw ResumableError(.fileSystem, "could not create \(addingPath): \(String(cString: strerror(errno)))")
        }
        close(descriptor)
        DurableSteps.record(.create, addingPath)
        DurableSteps.flushDirectory(directory.path)
    }

    /// Marks the end of a list's addition, once every record of it is on disk (flushed): downloads may start.
    package func endAddition() throws(ResumableError) {
        guard unlink(addingPath) == 0 else {
            throw ResumableError(.fileSystem, "could not remove \(addingPath): \(String(cString: strerror(errno)))")
        }
        DurableSteps.record(.unlink, addingPath)
        DurableSteps.flushDirectory(directory.path)
    }

    // MARK: - Claimed names

    /// `claims`: the paths this store's downloads moved (or were about to move) their finished files to, each with
    /// the download's identifier, so that a queue continued after a restart never replaces one of them with
    /// ``DownloadTask/ExistingFilePolicy/overwrite`` (``FinalPathClaims``).
    private var claimsPath: String { (directory.path as NSString).appendingPathComponent("claims") }

    /// The most `claims` may hold: appends stop there, and a reader reads no more (a batch of a hundred thousand files
    /// with long paths stays well under it).
    static let maximumClaimsSize = 16 << 20

    /// The owner of an entry that gives its path back (``releaseClaim(_:)``): the nil UUID, never a download's.
    static let releasedOwner = "00000000-0000-0000-0000-000000000000"

    /// Set once the store's queue is released: from then on the download that removes the last record also removes
    /// `claims` (``remove(_:flushing:)``).
    private let queueReleased = Atomic<Bool>(false)

    /// Removes `claims` when no record is left on disk (none read, written or refused): nothing is left to finish, so
    /// the names the finished downloads took concern nobody any more. Called when a queue starts on the store (a
    /// new batch must not inherit an old one's names) and when it is released (then also by the last removal).
    func removeClaimsIfNothingIsLeft() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: tasksPath),
            !names.contains(where: { $0.hasSuffix(".json") })
        else { return }
        unlink(claimsPath)
    }

    /// The store's queue is released: `claims` goes now if no record is left, or with the last record removed.
    func queueWasReleased() {
        queueReleased.store(true, ordering: .sequentiallyConsistent)
        removeClaimsIfNothingIsLeft()
    }

    /// Appends a claim to `claims`, before the move it announces: one `write` of `NUL id NUL path NUL`, not flushed
    /// (a claim lost in a crash of the system costs only caution: the same name may be replaced later). Best effort;
    /// nothing is appended past ``maximumClaimsSize``. The leading NUL lets a reader find the next entry after one
    /// torn by a crash or a full disk.
    func recordClaim(_ path: String, by owner: String) {
        append(owner: owner, path: path)
    }

    /// Records that `path` is nobody's any more (a move to it failed): a later claim of anyone may take it.
    func releaseClaim(_ path: String) {
        append(owner: Self.releasedOwner, path: path)
    }

    private func append(owner: String, path: String) {
        var bytes: [UInt8] = [0]
        bytes += Array(owner.utf8)
        bytes.append(0)
        bytes += Array(path.utf8)
        bytes.append(0)
        // Never through a symbolic link, never blocking on a FIFO, and only into a regular file.
        let descriptor = open(claimsPath, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG,
            Int(status.st_size) + bytes.count <= Self.maximumClaimsSize
        else { return }
        #if canImport(Glibc)
            _ = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
        #else
            _ = bytes.withUnsafeBytes { Darwin.write(descriptor, $0.baseAddress, $0.count) }
        #endif
    }

    /// The claims in `claims`, one per path: the last entry for a path wins, and a release (``releaseClaim(_:)``)
    /// leaves the path unclaimed. None when the file is missing, unreadable or not a regular file; at most the first
    /// ``maximumClaimsSize`` bytes are read. An entry is an identifier (a UUID) followed by an absolute path, each
    /// ended by a NUL; anything else (a torn entry, the NUL that starts each entry) is skipped, and reading goes on
    /// after the next NUL. A torn entry may yield a shortened path: a claim on a name nobody took, which costs only
    /// caution. One pass over the bytes, without a copy per field.
    func claims() -> [(path: String, owner: String)] {
        let descriptor = open(claimsPath, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else { return [] }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else { return [] }
        var data = [UInt8](repeating: 0, count: min(Int(status.st_size), Self.maximumClaimsSize))
        var done = 0
        while done < data.count {
            let count = data.withUnsafeMutableBytes { read(descriptor, $0.baseAddress! + done, $0.count - done) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            done += count
        }
        var order: [String] = []
        var owners: [String: String] = [:]
        data.withUnsafeBufferPointer { bytes in
            let end = done
            /// The end (index of the NUL) of the field that starts at `start`; `nil` when no NUL ends it.
            func fieldEnd(from start: Int) -> Int? {
                var index = start
                while index < end, bytes[index] != 0 { index += 1 }
                return index < end ? index : nil
            }
            var start = 0
            while start < end {
                guard let ownerEnd = fieldEnd(from: start) else { break }
                // A UUID is 36 bytes; the cheap test first, then the exact one.
                if ownerEnd - start == 36, ownerEnd + 1 < end, bytes[ownerEnd + 1] == UInt8(ascii: "/"),
                    let pathEnd = fieldEnd(from: ownerEnd + 1),
                    let owner = String(validating: bytes[start..<ownerEnd], as: UTF8.self),
                    UUID(uuidString: owner) != nil,
                    let path = String(validating: bytes[(ownerEnd + 1)..<pathEnd], as: UTF8.self)
                {
                    if owners.updateValue(owner, forKey: path) == nil { order.append(path) }
                    start = pathEnd + 1
                } else {
                    start = ownerEnd + 1
                }
            }
        }
        return order.compactMap { path in
            guard let owner = owners[path], owner != Self.releasedOwner else { return nil }
            return (path, owner)
        }
    }

    /// Flushes `tasks/`: the records written with `flushingDirectory` false are on disk after this returns.
    func flushDirectory() {
        if let tasks = try? currentTasks() { fsync(tasks) }
    }

    /// `creating`: the store wrote or read no record of this download, so none is on disk (a new one is 0600).
    private func write(
        _ record: TaskRecord, creating: Bool = false, flushingDirectory: Bool = true
    ) throws(ResumableError) {
        let data: Data
        do {
            data = try record.encodedJSON()
        } catch {
            throw ResumableError(.invalidRequest, "the task record of \(record.id) cannot be encoded: \(error)")
        }
        // Never a record no later run could read back (see ``maximumRecordSize``): the write fails instead, and the
        // record on disk stays as it was. What a record holds is bounded where it comes in (URLs, server values,
        // failure messages), so this is only the last line.
        guard data.count <= Self.maximumRecordSize else {
            throw ResumableError(
                .invalidRequest,
                "the task record of \(record.id) would be \(data.count) bytes, over the \(Self.maximumRecordSize) a store reads back"
            )
        }
        let name = "\(record.id).json"
        let tasks = try currentTasks()
        try AtomicFile.write(
            data, name: name, in: tasks, path: (tasksPath as NSString).appendingPathComponent(name), creating: creating)
        // Best effort, like every directory flush (DurableSteps.flushDirectory).
        if flushingDirectory { fsync(tasks) }
    }

    // MARK: - Reading

    /// A record file that could not be used, and why. It is left where it is.
    public struct Problem: Sendable, CustomStringConvertible {
        /// The record file.
        public var file: URL
        /// Why it was not used.
        public var error: ResumableError

        public var description: String { "\(file.path): \(error)" }
    }

    /// Claims the store for one queue; false when another queue has it (for the store's whole life: a new queue
    /// opens the directory again, once the old queue and its downloads let it go).
    func claimForQueue() -> Bool {
        !claimedByQueue.exchange(true, ordering: .acquiringAndReleasing)
    }

    /// Reads every record; those that cannot be read are reported and left alone.
    ///
    /// Records that name the same temporary file are all refused: two downloads writing into one file would splice
    /// them. The store writes no such records; a crafted or damaged store can hold them.
    func load() -> (records: [TaskRecord], problems: [Problem]) {
        var (records, problems) = Self.readRecords(in: tasksPath)
        // The store's downloads keep their temporary files in its own `partial/`. A store that was moved, copied (a
        // backup restored elsewhere) or opened through another path (a symbolic link) holds tokens naming the files
        // where they were written: each is pointed at the file of that name in this store's `partial/`, whatever
        // is still at the old path (the original of a copy belongs to the original store). Only there: a token never
        // chooses where to read or write, and only a name this library gives its temporary files is followed.
        records = records.map { record in
            guard var record = Optional(record), let token = record.token else { return record }
            let name = (token.tempPath as NSString).lastPathComponent
            let directory = (token.tempPath as NSString).deletingLastPathComponent
            guard !directory.utf8.elementsEqual(partialPath.utf8), TemporaryFileName.isValid(name) else {
                return record
            }
            record.token = token.movingTemporaryFile(to: (partialPath as NSString).appendingPathComponent(name))
            return record
        }
        // A destination inside the store could replace the store's own files (a record, the lock): left alone.
        records.removeAll { record in
            guard holds(record.destination) else { return false }
            problems.append(
                Problem(
                    file: URL(fileURLWithPath: recordPath(record.id)),
                    error: ResumableError(
                        .invalidRequest,
                        "its destination '\(record.destination.tokenValue)' lies inside the task store's directory")))
            return true
        }
        // One file, however its path is spelled (`partial//NAME`, `partial/./NAME`, a symbolic link to a directory).
        let paths = records.compactMap { $0.token?.tempPath }
        let shared = Set(Dictionary(grouping: paths) { Self.fileKey($0) }.filter { $0.value.count > 1 }.keys)
        if !shared.isEmpty {
            for record in records {
                guard let path = record.token?.tempPath, shared.contains(Self.fileKey(path)) else { continue }
                problems.append(
                    Problem(
                        file: URL(fileURLWithPath: recordPath(record.id)),
                        error: ResumableError.invalidToken(
                            field: "token.tempPath", "names a temporary file another record names too")))
            }
            records.removeAll { $0.token.map { shared.contains(Self.fileKey($0.tempPath)) } ?? false }
        }
        state.withLock { state in
            for record in records {
                state.records[record.id] = record
                state.written[record.id] = record
            }
        }
        return (records, problems)
    }

    /// Whether `destination`'s directory is the store's directory or lies inside it, by path as given and, where the
    /// directories exist, as resolved (symbolic links followed); compared as bytes.
    ///
    /// The last answer is used again only while the destination's directory is still the directory it was (device and
    /// inode, one `stat` that follows links): a link in its path pointed elsewhere since is asked about afresh.
    func holds(_ destination: DownloadTask.Destination) -> Bool {
        let path = destination.directoryPath
        var status = stat()
        let identity = stat(path, &status) == 0 ? (UInt64(status.st_dev), UInt64(status.st_ino)) : nil
        if let identity, let last = lastHoldsAnswer.withLock({ $0 }), last.directory.utf8.elementsEqual(path.utf8),
            last.device == identity.0, last.inode == identity.1
        {
            return last.holds
        }
        let holds = Self.directory(directory, holds: destination)
        if let identity { lastHoldsAnswer.withLock { $0 = (path, identity.0, identity.1, holds) } }
        return holds
    }

    /// ``holds(_:)``'s last answer: for which directory (as given, and its device and inode then).
    private let lastHoldsAnswer = Mutex<(directory: String, device: UInt64, inode: UInt64, holds: Bool)?>(nil)

    /// ``holds(_:)`` for the store that is or would be in `directory`, before it is opened.
    package static func directory(_ directory: URL, holds destination: DownloadTask.Destination) -> Bool {
        func inside(_ path: String, _ root: String) -> Bool {
            path.utf8.elementsEqual(root.utf8) || path.utf8.starts(with: (root + "/").utf8)
        }
        let root = directory.standardizedFileURL.path
        let path = URL(fileURLWithPath: destination.directoryPath).standardizedFileURL.path
        if inside(path, root) { return true }
        // Neither need exist yet: each is resolved through its deepest existing ancestor.
        guard let resolvedRoot = ResolvedPath.throughExistingAncestors(root),
            let resolvedPath = ResolvedPath.throughExistingAncestors(path)
        else {
            return false
        }
        return inside(resolvedPath, resolvedRoot)
    }

    /// What the store in `directory` holds, without opening it (no lock taken, nothing created or removed): for
    /// `resumable list` while a batch runs. `inUse`: a queue holds the store now.
    ///
    /// While a queue holds the store, a queued download whose last checkpoint is at most
    /// ``runningCheckpointAge`` old is listed as running, with the rate between its last two checkpoints.
    package static func listing(directory: URL, now: Date = Date()) -> (
        items: [DownloadQueue.Item], problems: [Problem], inUse: Bool
    ) {
        let path = directory.standardizedFileURL.path
        var inUse = false
        let descriptor = open(
            (path as NSString).appendingPathComponent("lock"), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        var status = stat()
        if descriptor >= 0, fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG {
            inUse = flock(descriptor, LOCK_SH | LOCK_NB) != 0
        }
        if descriptor >= 0 { close(descriptor) }
        let (records, problems) = readRecords(in: (path as NSString).appendingPathComponent("tasks"))
        let items = records.sorted {
            $0.priority != $1.priority ? $0.priority > $1.priority : $0.order < $1.order
        }.map { record in
            let state: DownloadQueue.State
            var rate: Int64 = 0
            switch record.state {
            case .queued:
                if inUse, let checkpointed = record.checkpointedAt, let bytesPerSecond = record.bytesPerSecond,
                    abs(now.timeIntervalSince(checkpointed)) <= runningCheckpointAge
                {
                    state = .running
                    rate = bytesPerSecond
                } else {
                    state = .waiting
                }
            case .paused: state = .paused
            case .failed: state = .failed(ResumableError(.network, record.failure ?? "failed"))
            }
            return DownloadQueue.Item(
                id: record.id, url: record.url, destination: record.destination, priority: record.priority,
                state: state, bytesOnDisk: record.token?.bytesCovered ?? 0,
                expectedLength: record.token?.expectedLength,
                bytesPerSecond: Double(rate))
        }
        return (items, problems, inUse)
    }

    private static func readRecords(in tasksPath: String) -> (records: [TaskRecord], problems: [Problem]) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: tasksPath) else { return ([], []) }
        var records: [TaskRecord] = []
        var problems: [Problem] = []
        let decoder = JSONDecoder()
        for name in names where name.hasSuffix(".json") {
            let path = (tasksPath as NSString).appendingPathComponent(name)
            do throws(ResumableError) {
                let record = try Self.decodeRecord(Self.readRecordFile(at: path), decoder: decoder)
                guard "\(record.id).json" == name else {
                    throw ResumableError.invalidToken(field: "id", "does not match the record's file name")
                }
                records.append(record)
            } catch {
                // Removed between the listing and the read (`resumable list` beside a running batch, whose finished
                // downloads' records go): nothing to report.
                var status = stat()
                if lstat(path, &status) != 0, errno == ENOENT { continue }
                problems.append(Problem(file: URL(fileURLWithPath: path), error: error))
            }
        }
        return (records, problems)
    }

    static let maximumRecordSize = 1 << 20

    /// How old a running download's last checkpoint may be for ``listing(directory:now:)`` to call it running.
    package static let runningCheckpointAge: TimeInterval = 10

    private static func decodeRecord(_ data: Data, decoder: JSONDecoder) throws(ResumableError) -> TaskRecord {
        do {
            return try decoder.decode(TaskRecord.self, from: data)
        } catch let error as ResumableError {
            throw error
        } catch {
            throw ResumableError(.invalidToken, "the task record is not valid JSON of the expected shape")
        }
    }

    private static func readRecordFile(at path: String) throws(ResumableError) -> Data {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw ResumableError(.invalidToken, "cannot open the task record: \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG,
            status.st_size <= maximumRecordSize
        else {
            throw ResumableError(.invalidToken, "the task record is not a regular file of at most 1 MiB")
        }
        var data = Data(count: Int(status.st_size))
        let count = data.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count == Int(status.st_size) else {
            throw ResumableError(.invalidToken, "the task record could not be read whole")
        }
        return data
    }

    // MARK: - Cleaning up

    /// What identifies the file at `path`: its device and inode when it exists (symbolic links followed, so every
    /// spelling of one file has one key), else the path without empty and `.` components.
    private static func fileKey(_ path: String) -> String {
        var status = stat()
        if stat(path, &status) == 0 { return "\(status.st_dev):\(status.st_ino)" }
        return "/" + path.split(separator: "/").filter { $0 != "." }.joined(separator: "/")
    }

    /// Removes the temporary files in `partial/` that no record names and no download holds.
    ///
    /// Only files named like this library's temporary files (`.resumable-<UUID>.partial`), regular, of this
    /// user and not locked by a running download (ours or another process's) are removed; anything else in
    /// `partial/` is left alone. They are left behind when a process is killed after a download restarted into
    /// a new temporary file but before its record named it.
    ///
    /// - Returns: The paths removed.
    ///
    /// - Parameters:
    ///   - referenced: Paths to keep.
    ///   - only: Look at this one file of `partial/` only (a cancelled download's).
    @discardableResult
    func removeUnownedTemporaryFiles(keeping referenced: Set<String>, only: String? = nil) -> [String] {
        let names: [String]
        if let only {
            // Byte for byte: a directory whose name is only canonically equivalent to `partial/` is another one.
            guard (only as NSString).deletingLastPathComponent.utf8.elementsEqual(partialPath.utf8) else { return [] }
            names = [(only as NSString).lastPathComponent]
        } else {
            names = (try? FileManager.default.contentsOfDirectory(atPath: partialPath)) ?? []
        }
        // A record may spell its file's path otherwise (`partial//NAME`): what is kept is the file it names.
        let referencedFiles = Set(referenced.map(Self.fileKey))
        var removed: [String] = []
        for name in names where TemporaryFileName.isValid(name) {
            let path = (partialPath as NSString).appendingPathComponent(name)
            guard !referenced.contains(path), !referencedFiles.contains(Self.fileKey(path)) else { continue }
            let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard descriptor >= 0 else { continue }
            defer { close(descriptor) }
            var status = stat()
            guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG,
                status.st_uid == geteuid(), flock(descriptor, LOCK_EX | LOCK_NB) == 0
            else { continue }
            // Still the file that was checked (not replaced between open and unlink), and locked meanwhile.
            var current = stat()
            guard lstat(path, &current) == 0, current.st_ino == status.st_ino, current.st_dev == status.st_dev
            else { continue }
            if unlink(path) == 0 {
                DurableSteps.record(.unlink, path)
                removed.append(path)
            }
        }
        return removed
    }
}
