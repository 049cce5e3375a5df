import Foundation

/// Runs many downloads: a limit on how many run at once (in all and per host), priorities, first in first out
/// within a priority, pause, resume, cancel and reordering, and one stream of events for all of them.
///
/// With a ``TaskStore``, the queue survives crashes and restarts: every unfinished download's record (its place,
/// state and last checkpoint token) is on disk, and ``restore()`` brings each one back where its checkpoint says.
///
/// ```swift
/// let store = try TaskStore(directory: stateDirectory)
/// let queue = DownloadQueue(configuration: .init(maximumConcurrentDownloads: 4), store: store)
/// _ = await queue.restore()
/// for url in urls { _ = try await queue.add(url, destination: .directory(downloads)) }
/// let summary = await queue.waitUntilIdle()
/// ```
///
/// A queue that is released (its last reference dropped) pauses the downloads it runs, as ``suspend()`` would
/// without waiting for them: each leaves its token with the store, and a queue restored from it later continues them.
///
/// `QueueSchedule` decides which downloads run; the queue performs its decisions.
public actor DownloadQueue {
    /// Identifies a download in a queue and in its ``TaskStore``.
    public struct TaskID: Hashable, Sendable, CustomStringConvertible, Comparable {
        let uuid: UUID

        init() { uuid = UUID.random() }

        /// Parses the lowercase UUID form of ``description``.
        public init?(_ text: String) {
            guard text.count == 36, let uuid = UUID(uuidString: text), uuid.uuidString.lowercased() == text else {
                return nil
            }
            self.uuid = uuid
        }

        public var description: String { uuid.uuidString.lowercased() }

        public static func < (lhs: TaskID, rhs: TaskID) -> Bool { lhs.description < rhs.description }
    }

    /// How a queue runs its downloads.
    public struct Configuration: Sendable {
        /// Downloads running at once, in all (at least 1).
        public var maximumConcurrentDownloads: Int
        /// Downloads running at once on one host: scheme, host and port (at least 1).
        public var maximumConcurrentDownloadsPerHost: Int
        /// The configuration of every download. With a ``TaskStore``, its `temporaryDirectory` and
        /// `checkpointing` are the store's.
        public var download: DownloadTask.Configuration
        /// Whether a download that failed for good (nothing to resume: a 404, a checksum mismatch) stays in the
        /// queue and its store, as ``State/failed(_:)`` with no token, until it is resumed (from byte 0) or
        /// cancelled, instead of leaving at once. The CLI's batches keep them until their summary is written, so
        /// that a crash before it cannot make a later `resume --state` call the batch complete.
        package var keepsFailuresForGood = false

        /// - Parameters:
        ///   - maximumConcurrentDownloads: Downloads running at once, in all.
        ///   - maximumConcurrentDownloadsPerHost: Downloads running at once on one host; by default the same.
        ///   - download: The configuration of every download.
        public init(
            maximumConcurrentDownloads: Int = 4,
            maximumConcurrentDownloadsPerHost: Int? = nil,
            download: DownloadTask.Configuration = .default
        ) {
            self.maximumConcurrentDownloads = maximumConcurrentDownloads
            self.maximumConcurrentDownloadsPerHost = maximumConcurrentDownloadsPerHost ?? maximumConcurrentDownloads
            self.download = download
        }

        /// Four at once, four per host, the default download configuration.
        public static let `default` = Configuration()
    }

    /// Where a download stands.
    public enum State: Sendable {
        /// Waiting for its turn.
        case waiting
        /// Running.
        case running
        /// Paused; ``DownloadQueue/resume(_:)`` puts it back in line.
        case paused
        /// It failed but can continue from its token; ``DownloadQueue/resume(_:)`` puts it back in line.
        ///
        /// `indirect`: the error (with its token, ≈ 300 bytes) on the heap, so that every ``Item`` is not that
        /// much larger for the few that failed.
        indirect case failed(ResumableError)
    }

    /// A download in the queue.
    public struct Item: Sendable {
        public var id: TaskID
        public var url: URL
        public var destination: DownloadTask.Destination
        public var priority: Int
        public var state: State
        /// Bytes on disk, as of the last progress or token.
        public var bytesOnDisk: Int64
        /// The file's size, when known.
        public var expectedLength: Int64?
        /// The recent rate of a running download, in bytes per second.
        public var bytesPerSecond: Double
    }

    /// Something that happened to a download of the queue.
    public enum Event: Sendable {
        /// It joined the queue (added, or restored from the store), for this URL (without credentials).
        case added(TaskID, URL)
        /// It started (or continued from its token).
        case started(TaskID)
        /// An event of the running download: progress, retries, restarts, segments.
        ///
        /// This case, ``finished(_:_:)`` and ``failed(_:_:)`` are `indirect`: their payloads (≈ 300 bytes) on
        /// the heap, so that the other events, above all the 10,000 ``added(_:_:)`` of a restore waiting in a
        /// subscriber's stream, are 32 bytes each rather than 344.
        indirect case download(TaskID, DownloadEvent)
        /// It paused; the token is kept (in the store, when there is one).
        case paused(TaskID)
        /// It finished: the file is in place, and it left the queue.
        indirect case finished(TaskID, DownloadResult)
        /// Restored from the store, it turned out to have finished before the crash; it left the queue.
        case finishedEarlier(TaskID)
        /// It failed. With a ``ResumableError/resumeToken`` it stays, as ``State/failed(_:)``, until resumed or
        /// cancelled; without, it left the queue.
        indirect case failed(TaskID, ResumableError)
        /// It was cancelled; its bytes were discarded and it left the queue.
        case cancelled(TaskID)
    }

    /// How ``waitUntilIdle()`` found the queue.
    public struct Summary: Sendable, Equatable {
        public var finished: Int
        public var failed: Int
        public var cancelled: Int
        /// Paused, or failed with a token: in the queue still.
        public var waitingForResume: Int
    }

    private struct Entry {
        var url: URL
        var destination: DownloadTask.Destination
        var priority: Int
        var expectedSHA256: String?
        var task: DownloadTask?
        var cancelRequested = false
        var progress: DownloadProgress?
        /// Whether the running task's events are forwarded to the queue's subscribers.
        var forwarding = false
        /// Whether it failed for good and stays only because of ``Configuration/keepsFailuresForGood``: nothing of it
        /// is on disk to resume.
        var failedForGood = false
        /// The token and the failure on the heap, where they cost a pointer when absent: inline they are 528
        /// bytes of every slot of `entries` (224 and 304), ≈ 8 MiB for a queue of 10,000 (a dictionary keeps a
        /// quarter of its slots empty), and most entries have neither.
        private var boxedToken: Box<ResumeToken>?
        private var boxedFailure: Box<ResumableError>?

        init(
            url: URL, destination: DownloadTask.Destination, priority: Int, expectedSHA256: String?,
            token: ResumeToken? = nil
        ) {
            self.url = url
            self.destination = destination
            self.priority = priority
            self.expectedSHA256 = expectedSHA256
            self.token = token
        }

        var token: ResumeToken? {
            get { boxedToken?.value }
            set { boxedToken = newValue.map(Box.init) }
        }
        var failure: ResumableError? {
            get { boxedFailure?.value }
            set { boxedFailure = newValue.map(Box.init) }
        }
    }

    private final class Box<Value: Sendable>: Sendable {
        let value: Value
        init(_ value: Value) { self.value = value }
    }

    private let configuration: Configuration
    private let store: TaskStore?
    /// Why the store given to `init` is not used: another queue has it. Every call that needs it fails with this.
    private let storeConflict: (directory: URL, error: ResumableError)?
    private var schedule: QueueSchedule
    private var entries: [TaskID: Entry] = [:]
    private var subscribers: [UUID: AsyncStream<Event>.Continuation] = [:]
    private var idleWaiters: [CheckedContinuation<Summary, Never>] = []
    private var summary = Summary(finished: 0, failed: 0, cancelled: 0, waitingForResume: 0)
    /// One transport session for all the queue's downloads, so requests to a host reuse its kept-alive
    /// connections; made at the first start.
    private var sharedSession: SharedTransportSession?
    /// Where this queue's finished files went (and, with a store, those of its earlier runs): an `overwrite` never
    /// replaces one of them.
    private let finalPathClaims: FinalPathClaims
    private let hooks: Hooks

    /// Test seams.
    struct Hooks: Sendable {
        /// Runs on the download's own thread when its file is in place, just before its record leaves the store:
        /// the record on disk is the one a crash at that moment leaves.
        var beforeFinishedRecordRemoved: (@Sendable (TaskID) -> Void)?
        /// Runs on the download's own thread right after its finished file's record left the store, before the
        /// download's result reaches the queue.
        var afterFinishedRecordRemoved: (@Sendable (TaskID) -> Void)?
        /// Awaited when a download's result is there, before it reaches the queue.
        var beforeEnded: (@Sendable (TaskID) async -> Void)?
    }

    /// A queue with nothing in it.
    ///
    /// - Parameters:
    ///   - configuration: Limits and the configuration of every download.
    ///   - store: Where unfinished downloads are kept across restarts; `nil`: in memory only. A store serves one
    ///     queue for its whole life: a queue given a store another queue has uses none, and its ``add(_:destination:priority:expectedSHA256:paused:)``,
    ///     ``add(contentsOf:)`` and ``restore()`` fail with ``ResumableError/Code/invalidRequest``.
    public init(configuration: Configuration = .default, store: TaskStore? = nil) {
        self.init(configuration: configuration, store: store, hooks: Hooks())
    }

    init(configuration: Configuration, store: TaskStore?, hooks: Hooks) {
        self.configuration = configuration
        self.hooks = hooks
        if let store, !store.claimForQueue() {
            self.store = nil
            storeConflict = (
                store.directory,
                ResumableError(
                    .invalidRequest,
                    "the task store at '\(store.directory.path)' is used by another queue; open it again (TaskStore(directory:)) for a new one"
                )
            )
        } else {
            self.store = store
            storeConflict = nil
        }
        if let store = self.store {
            // Names an earlier, complete batch took concern nobody: only a store with records left keeps them.
            store.removeClaimsIfNothingIsLeft()
            finalPathClaims = FinalPathClaims(
                onClaim: { path, owner in store.recordClaim(path, by: owner) },
                onRelease: { path in store.releaseClaim(path) })
        } else {
            finalPathClaims = FinalPathClaims()
        }
        self.schedule = QueueSchedule(
            limits: .init(
                concurrent: configuration.maximumConcurrentDownloads,
                perHost: configuration.maximumConcurrentDownloadsPerHost))
    }

    // MARK: - Events

    /// Every event of every download from now on. Each call returns a new stream; it ends when the queue is
    /// released.
    public func events() -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream<Event>.makeStream()
        let key = UUID()
        subscribers[key] = continuation
        // Downloads started while nobody listened forward their events from now on.
        for (id, entry) in entries where !entry.forwarding {
            if let task = entry.task { forwardEvents(id, of: task) }
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            Task { await self.unsubscribe(key) }
        }
        return stream
    }

    private func unsubscribe(_ key: UUID) { subscribers[key] = nil }

    /// Ends every stream ``events()`` returned, after the events already sent: a subscriber that reads on sees each
    /// of them, then the end. For an owner that is done with an idle queue (the CLI's batch, before its summary).
    package func finishEvents() {
        for continuation in subscribers.values { continuation.finish() }
        subscribers.removeAll()
    }

    private func send(_ event: Event) {
        for continuation in subscribers.values { continuation.yield(event) }
    }

    // Not an `isolated deinit`: the 6.3 compiler's optimizer runs into a cycle on one (ActorIsolationRequest) when it
    // builds a module that uses the queue in release mode. Stored properties are this deinit's alone.
    deinit {
        // The running downloads stop: closing the session alone does not reach one that waits in a rate limiter, which
        // would go on (holding its temporary file, the session and the task store) until its turn came, minutes at a
        // low rate. What the queue would have done when each ended (`ended`), it cannot do any more: it is done here.
        for (id, entry) in entries {
            guard let task = entry.task else { continue }
            if entry.cancelRequested {
                // The user's cancel stands: the task discards its bytes, and the record goes. A task that already
                // ended (a pause that reached it before the cancel) discards nothing any more: the file its last
                // token names goes here, unless a running task still holds it (then the task removes it itself).
                task.cancel()
                if let store {
                    Self.discardTemporaryFile(of: store.record(id)?.token ?? entry.token, in: store)
                    store.remove(id)
                }
                continue
            }
            if schedule.phase(of: id) == .pausing, let store, let order = schedule.orderOf(id) {
                // The user's pause (or a suspend) stands. The record keeps accepting checkpoints, so the pause's
                // last token still reaches it. Only a record still in the store: a download that finished while
                // its pause was on the way removed its record when its file was in place, and writing one back
                // would download the file again, under another name, on the next restore.
                try? Self.persist(
                    entry, id: id, order: order, in: store, state: .paused, running: nil, onlyIfPresent: true)
            }
            // Otherwise the record stays queued: a restored queue runs the download again from its token.
            task.requestPause("the download queue was released")
        }
        for continuation in subscribers.values { continuation.finish() }
        sharedSession?.close()
        // A batch that is complete leaves no state (a released queue with downloads left keeps their names; the
        // download that removes the last record after this takes them along).
        store?.queueWasReleased()
    }

    // MARK: - Adding and restoring

    /// Adds a download behind the others of its priority; it starts when its turn comes (or waits, `paused`).
    /// A priority beyond ±2^53 counts as ±2^53 (what a task record holds exactly).
    ///
    /// - Throws: ``ResumableError/Code/invalidRequest`` for a URL that is not http(s), an invalid
    ///   `expectedSHA256`, a destination path of 4,096 characters or more, or (with a store) a URL with a user name
    ///   or password, which a store never keeps; ``ResumableError/Code/fileSystem`` when the store cannot write the
    ///   record.
    @discardableResult
    public func add(
        _ url: URL,
        destination: DownloadTask.Destination = .currentDirectory,
        priority: Int = 0,
        expectedSHA256: String? = nil,
        paused: Bool = false
    ) throws(ResumableError) -> TaskID {
        if let storeConflict { throw storeConflict.error }
        let (id, actions) = try insert(
            Addition(
                url, destination: destination, priority: priority, expectedSHA256: expectedSHA256, paused: paused),
            flushingDirectory: true)
        send(.added(id, HTTPURL.removingUserInfo(url)))
        perform(actions)
        return id
    }

    /// A download for ``add(contentsOf:)``: the arguments of ``add(_:destination:priority:expectedSHA256:paused:)``.
    public struct Addition: Sendable {
        public var url: URL
        public var destination: DownloadTask.Destination
        public var priority: Int
        public var expectedSHA256: String?
        public var paused: Bool

        public init(
            _ url: URL,
            destination: DownloadTask.Destination = .currentDirectory,
            priority: Int = 0,
            expectedSHA256: String? = nil,
            paused: Bool = false
        ) {
            self.url = url
            self.destination = destination
            self.priority = priority
            self.expectedSHA256 = expectedSHA256
            self.paused = paused
        }
    }

    /// Adds downloads in order, as ``add(_:destination:priority:expectedSHA256:paused:)`` would one after the
    /// other, and stops at the first that cannot be added. With a store, their records are flushed to disk each,
    /// and the store's directory once for all of them (not once each) before any of them starts or is reported
    /// added: a crash before that flush loses only downloads that have no byte yet and were not reported added.
    ///
    /// - Returns: The identifiers of the downloads added, in order, and why the next one could not be (the
    ///   errors of ``add(_:destination:priority:expectedSHA256:paused:)``), if one could not.
    public func add(contentsOf additions: [Addition]) -> (added: [TaskID], failure: ResumableError?) {
        if let storeConflict { return ([], storeConflict.error) }
        var added: [TaskID] = []
        var actions: [QueueSchedule.Action] = []
        var failure: ResumableError?
        for addition in additions {
            do throws(ResumableError) {
                let (id, more) = try insert(addition, flushingDirectory: false)
                added.append(id)
                actions += more
            } catch {
                failure = error
                break
            }
        }
        if !added.isEmpty { store?.flushDirectory() }
        for id in added where !subscribers.isEmpty {
            if let url = entries[id]?.url { send(.added(id, HTTPURL.removingUserInfo(url))) }
        }
        perform(actions)
        return (added, failure)
    }

    /// Checks `addition`, puts it in the queue and writes its record; the caller reports and performs.
    private func insert(
        _ addition: Addition, flushingDirectory: Bool
    ) throws(ResumableError) -> (TaskID, [QueueSchedule.Action]) {
        let (url, destination, priority, expectedSHA256, paused) = (
            addition.url, addition.destination, Self.storable(addition.priority), addition.expectedSHA256,
            addition.paused
        )
        if let problem = HTTPURL.problem(with: url) {
            throw ResumableError(
                .invalidRequest, "\(problem): \(HTTPURL.excerpt(HTTPURL.removingUserInfo(url).description))")
        }
        if let store, store.holds(destination) {
            throw ResumableError(
                .invalidRequest,
                "the destination '\(destination.tokenValue)' lies inside the task store's directory "
                    + "'\(store.directory.path)': a download there could replace the store's own files")
        }
        if store != nil, HTTPURL.hasUserInfo(url) {
            throw ResumableError(
                .invalidRequest,
                "a URL with a user name or password cannot be kept in a task store; send credentials in a header")
        }
        var digest: String?
        if let expectedSHA256 {
            guard let normalized = SHA256Digest.normalized(expectedSHA256) else {
                throw ResumableError(.invalidRequest, "expectedSHA256 must be 64 hexadecimal digits")
            }
            digest = normalized
        }
        // Only what a task record can hold and read back: a record refused at restore would lose the download.
        guard TaskRecord.canHold(destination: destination.tokenValue) else {
            throw ResumableError(
                .invalidRequest, "the destination path is longer than 4,095 characters or contains a NUL character")
        }
        let id = TaskID()
        let entry = Entry(url: url, destination: destination, priority: priority, expectedSHA256: digest)
        entries[id] = entry
        let actions = schedule.add(id, host: Self.host(of: url), priority: priority, paused: paused)
        do {
            try persist(
                id, state: paused ? .paused : .queued, running: false, flushingDirectory: flushingDirectory,
                creating: true)
        } catch {
            entries[id] = nil
            _ = schedule.cancel(id)
            throw error
        }
        return (id, actions)
    }

    /// Brings back every unfinished download of the store, in its place and state, and removes the temporary
    /// files in the store that no download owns any more (see ``TaskStore``); none when a record could not be read,
    /// as it may name one of them.
    ///
    /// - Returns: The record files that could not be used; they are left where they are.
    @discardableResult
    public func restore() -> [TaskStore.Problem] {
        if let storeConflict { return [TaskStore.Problem(file: storeConflict.directory, error: storeConflict.error)] }
        guard let store else { return [] }
        let (records, problems) = store.load()
        finalPathClaims.restore(store.claims())
        // Every temporary file a record or a download of this queue names is kept, not only the new ones'.
        var referenced = Set(records.compactMap { $0.token?.tempPath })
        referenced.formUnion(entries.values.compactMap { $0.token?.tempPath })
        var actions: [QueueSchedule.Action] = []
        for record in records.sorted(by: { $0.order < $1.order }) where entries[record.id] == nil {
            if let token = record.token { Self.removeLeftoverCopy(of: token, beside: record.destination) }
            var entry = Entry(
                url: record.url, destination: record.destination, priority: record.priority,
                expectedSHA256: record.expectedSHA256, token: record.token)
            if record.state == .failed {
                entry.failure = ResumableError(.network, record.failure ?? "failed before the restart")
                entry.failedForGood = record.token == nil
            }
            entry.progress = record.token.map {
                DownloadProgress(
                    bytesOnDisk: $0.bytesCovered, expectedLength: $0.expectedLength, resumedAtOffset: $0.offset,
                    bytesTransferred: 0, bytesPerSecond: 0)
            }
            entries[record.id] = entry
            send(.added(record.id, record.url))
            actions += schedule.add(
                record.id, host: Self.host(of: record.url), priority: record.priority,
                paused: record.state != .queued, order: record.order)
        }
        // A record that could not be read may name one of them: then nothing is removed.
        if problems.isEmpty {
            store.removeUnownedTemporaryFiles(keeping: referenced)
        }
        perform(actions)
        return problems
    }

    // MARK: - Control

    /// Pauses a download: a running one stops into its token; a waiting one keeps its place without starting.
    public func pause(_ id: TaskID) {
        guard let phase = schedule.phase(of: id) else { return }
        let actions = schedule.pause(id)
        if phase == .waiting {
            try? persist(id, state: .paused, running: false)
            send(.paused(id))
        }
        perform(actions)
    }

    /// Pauses every download.
    public func pauseAll() {
        for id in schedule.order { pause(id) }
    }

    /// Stops the queue: running downloads pause into their tokens, waiting ones keep their place (in the store
    /// too, where they stay queued), and nothing starts until ``unsuspend()``. What an interrupted program does:
    /// it writes one record per running download, not one per download in the queue.
    public func suspend() {
        perform(schedule.suspend())
    }

    /// Lets waiting downloads start again after ``suspend()``.
    public func unsuspend() {
        perform(schedule.unsuspend())
    }

    /// Puts a paused (or failed) download back in line.
    public func resume(_ id: TaskID) {
        guard schedule.phase(of: id) == .paused else { return }
        entries[id]?.failure = nil
        entries[id]?.failedForGood = false
        try? persist(id, state: .queued, running: false)
        perform(schedule.resume(id))
    }

    /// Puts every paused or failed download back in line.
    public func resumeAll() {
        for id in schedule.order where schedule.phase(of: id) == .paused { resume(id) }
    }

    /// Cancels a download: it stops, its bytes are discarded and it leaves the queue.
    public func cancel(_ id: TaskID) {
        guard let phase = schedule.phase(of: id), var entry = entries[id] else { return }
        let actions = schedule.cancel(id)
        if phase == .running || phase == .pausing {
            entry.cancelRequested = true
            entries[id] = entry
        } else {
            entries[id] = nil
            discardTemporaryFile(of: entry.token)
            store?.remove(id)
            summary.cancelled += 1
            send(.cancelled(id))
        }
        perform(actions)
    }

    /// Changes a download's priority (higher runs first); it goes behind the others of that priority.
    public func setPriority(_ id: TaskID, _ priority: Int) {
        guard entries[id] != nil else { return }
        let priority = Self.storable(priority)
        entries[id]?.priority = priority
        let actions = schedule.setPriority(id, priority)
        try? persist(id, state: nil, running: nil)
        perform(actions)
    }

    /// `priority` within ±2^53, what a task record holds exactly (``TaskRecord/maximumOrder``): a larger one was
    /// written, then refused when the store was read back, and the download was not restored.
    private static func storable(_ priority: Int) -> Int {
        Int(clamping: min(max(Int64(priority), -TaskRecord.maximumOrder), TaskRecord.maximumOrder))
    }

    /// Moves a download to the front of its priority.
    public func moveToFront(_ id: TaskID) {
        let actions = schedule.moveToFront(id)
        try? persist(id, state: nil, running: nil)
        perform(actions)
    }

    /// Changes how many downloads run at once; running ones beyond a lower limit finish first.
    public func setLimits(maximumConcurrentDownloads: Int, perHost: Int? = nil) {
        perform(
            schedule.setLimits(
                .init(concurrent: maximumConcurrentDownloads, perHost: perHost ?? maximumConcurrentDownloads)))
    }

    // MARK: - Looking

    /// Whether a failure that left nothing to resume is for good: not one that may pass by itself (a transient
    /// error: the retries ran out on a 503 or a refused connection before the first byte, a file in use) or once the
    /// user frees space (a full disk); those stay to be tried again.
    private static func isForGood(_ error: ResumableError) -> Bool {
        !(error.isTransient || error.code == .diskFull)
    }

    /// The downloads that failed for good and stay only because of ``Configuration/keepsFailuresForGood`` (nothing of
    /// them to resume; resumed, they start from byte 0).
    package var failuresForGood: [TaskID] {
        schedule.order.filter { id in entries[id]?.failedForGood == true && schedule.phase(of: id) == .paused }
    }

    /// The downloads in the queue, in the order they start.
    public var items: [Item] {
        schedule.order.compactMap { id in
            guard let entry = entries[id], let phase = schedule.phase(of: id) else { return nil }
            let state: State
            switch phase {
            case .waiting: state = .waiting
            case .running, .pausing: state = .running
            case .paused: state = entry.failure.map(State.failed) ?? .paused
            }
            // A running task's events may not be forwarded (nobody subscribes): its progress is the task's.
            let progress = entry.forwarding ? entry.progress : entry.task?.latestProgress ?? entry.progress
            return Item(
                id: id, url: HTTPURL.removingUserInfo(entry.url), destination: entry.destination,
                priority: entry.priority, state: state, bytesOnDisk: progress?.bytesOnDisk ?? 0,
                expectedLength: progress?.expectedLength,
                bytesPerSecond: phase == .running ? progress?.bytesPerSecond ?? 0 : 0)
        }
    }

    /// Waits until no download runs or waits (paused and failed ones may remain; after ``suspend()``, until none
    /// runs), then says how they ended since the queue was made.
    public func waitUntilIdle() async -> Summary {
        if isIdle { return currentSummary }
        return await withCheckedContinuation { idleWaiters.append($0) }
    }

    /// Nothing runs, and nothing waits that could start (paused or failed ones may remain; while suspended,
    /// waiting ones too).
    private var isIdle: Bool {
        if schedule.isSuspended { return schedule.runningCount == 0 }
        return !schedule.hasUnpaused
    }

    private var currentSummary: Summary {
        var result = summary
        result.waitingForResume = schedule.count
        return result
    }

    private func wakeIdleWaitersIfIdle() {
        guard isIdle, !idleWaiters.isEmpty else { return }
        let waiters = idleWaiters
        idleWaiters = []
        for waiter in waiters { waiter.resume(returning: currentSummary) }
    }

    // MARK: - Performing the schedule's actions

    private func perform(_ actions: [QueueSchedule.Action]) {
        for action in actions {
            switch action {
            case .start(let id): start(id)
            case .pause(let id):
                if let task = entries[id]?.task {
                    Task { _ = await task.cancelProducingResumeData() }
                }
            case .cancel(let id):
                entries[id]?.task?.cancel()
            }
        }
        wakeIdleWaitersIfIdle()
    }

    private func start(_ id: TaskID) {
        guard let entry = entries[id] else { return }
        var download = configuration.download
        download.finalPathClaims = finalPathClaims
        download.finalPathOwner = id.description
        if let expected = entry.expectedSHA256 { download.expectedSHA256 = expected }
        if let store {
            download.temporaryDirectory = URL(fileURLWithPath: store.partialPath, isDirectory: true)
            var checkpointing = DownloadTask.Checkpointing(
                interval: download.checkpointing?.interval ?? .seconds(1)
            ) { token in
                try store.checkpoint(id, token: token)
            }
            let (beforeRemoval, afterRemoval) = (hooks.beforeFinishedRecordRemoved, hooks.afterFinishedRecordRemoved)
            checkpointing.finished = { _ in
                beforeRemoval?(id)
                store.remove(id, flushing: false)
                afterRemoval?(id)
            }
            // A download that ends with nothing to resume (a checksum mismatch, a cancel, a pause before the first
            // byte) has its record forget the token before the temporary file goes: never a record on disk whose
            // token names a removed file.
            checkpointing.abandoned = { tempPath in store.forgetToken(id, naming: tempPath) }
            checkpointing.keepsInMemory = { token in store.checkpointInMemory(id, token: token) }
            download.checkpointing = checkpointing
        }
        // The record says "running" before anything runs: a download the store cannot track does not start.
        do {
            try persist(id, state: .queued, running: true, creating: true)
        } catch {
            // Its token and bytes stay: the failure carries the token, as any resumable failure does.
            var failure = error
            if failure.resumeToken == nil { failure.resumeToken = entry.token }
            entries[id]?.failure = failure
            summary.failed += 1
            send(.failed(id, failure))
            perform(schedule.ended(id, paused: true))
            return
        }
        let task: DownloadTask
        do {
            if sharedSession == nil {
                sharedSession = try SharedTransportSession.makeShared(configuration.download.transport)
            }
            if let sharedSession {
                download.sharedSession = sharedSession
                download.transport = sharedSession.transport
            }
            if let token = entry.token {
                task = try DownloadTask.resume(from: token, destination: entry.destination, configuration: download)
            } else {
                task = try DownloadTask(url: entry.url, destination: entry.destination, configuration: download)
            }
        } catch {
            if error.code == .tokenGone {
                // Its file was moved into place before the crash; only the record was left.
                entries[id] = nil
                store?.remove(id, flushing: false)
                summary.finished += 1
                send(.finishedEarlier(id))
                perform(schedule.ended(id, paused: false))
            } else {
                ended(id, result: .failure(error))
            }
            return
        }
        entries[id]?.task = task
        send(.started(id))
        // Each event is a hop onto the queue: none while nobody subscribes (`items` reads the task's progress).
        if !subscribers.isEmpty { forwardEvents(id, of: task) }
        let beforeEnded = hooks.beforeEnded
        Task { [weak self] in
            let result = await task.result
            await beforeEnded?(id)
            await self?.ended(id, result: result)
        }
    }

    private func forwardEvents(_ id: TaskID, of task: DownloadTask) {
        entries[id]?.forwarding = true
        Task { [weak self] in
            for await event in task.events {
                await self?.forward(id, event)
            }
        }
    }

    private func forward(_ id: TaskID, _ event: DownloadEvent) {
        if case .progress(let progress) = event { entries[id]?.progress = progress }
        send(.download(id, event))
    }

    private func ended(_ id: TaskID, result: Result<DownloadResult, ResumableError>) {
        guard var entry = entries[id] else { return }
        entry.task = nil
        entry.forwarding = false
        switch result {
        case .success(let download):
            entries[id] = nil
            store?.remove(id, flushing: false)
            summary.finished += 1
            send(.finished(id, download))
            perform(schedule.ended(id, paused: false))
        case .failure(let error) where entry.cancelRequested || error.code == .cancelled:
            // A pause that reached the task first left a token: its bytes go too.
            discardTemporaryFile(of: error.resumeToken)
            entries[id] = nil
            store?.remove(id)
            summary.cancelled += 1
            send(.cancelled(id))
            perform(schedule.ended(id, paused: false))
        case .failure(var error):
            // The task hands out no token when its last flush failed; the record's, written after an earlier flush,
            // still describes bytes on disk (unless the task gave its file up and only the record's rewrite failed).
            if error.resumeToken == nil, store?.keepsAbandonedFile(id) != true {
                error.resumeToken = store?.record(id)?.token
            }
            if let token = error.resumeToken {
                entry.token = token
                entry.progress = DownloadProgress(
                    bytesOnDisk: token.bytesCovered, expectedLength: token.expectedLength,
                    resumedAtOffset: token.offset,
                    bytesTransferred: 0, bytesPerSecond: 0)
                let paused = error.code == .paused
                entry.failure = paused ? nil : error
                entries[id] = entry
                try? persist(id, state: paused ? .paused : .failed, running: false)
                if paused {
                    send(.paused(id))
                } else {
                    summary.failed += 1
                    send(.failed(id, error))
                }
                perform(schedule.ended(id, paused: true))
            } else if error.code == .paused {
                // Paused before its first byte: nothing to resume from, but it stays, paused, and starts afresh.
                entry.token = nil
                entry.failure = nil
                entry.progress = nil
                entries[id] = entry
                store?.forgetToken(id)
                try? persist(id, state: .paused, running: false)
                send(.paused(id))
                perform(schedule.ended(id, paused: true))
            } else if configuration.keepsFailuresForGood {
                // Nothing to resume: it stays, failed, until resumed (from byte 0) or cancelled. Its record was
                // rewritten without a token before its temporary file went (`abandoned`), and now says why.
                entry.token = nil
                entry.failure = error
                // Nothing that may pass either (a 503 until the retries ran out, a full disk): for good.
                entry.failedForGood = Self.isForGood(error)
                entry.progress = nil
                entries[id] = entry
                try? persist(id, state: .failed, running: false)
                summary.failed += 1
                send(.failed(id, error))
                perform(schedule.ended(id, paused: true))
            } else {
                entries[id] = nil
                store?.remove(id)
                summary.failed += 1
                send(.failed(id, error))
                perform(schedule.ended(id, paused: false))
            }
        }
    }

    // MARK: - The store

    /// Writes the download's record; `state` and `running` nil keep what was written last.
    ///
    /// Only over a record the store holds, unless `creating` (a download added, or starting): a download that
    /// finished removed its record when its file was in place, which may be before its result reaches the queue. A
    /// pause, a priority change or a move to the front in that instant must not write it back, or the next restore
    /// would download the file again.
    private func persist(
        _ id: TaskID, state: TaskRecord.State?, running: Bool?, flushingDirectory: Bool = true, creating: Bool = false
    ) throws(ResumableError) {
        guard let store, let entry = entries[id], let order = schedule.orderOf(id) else { return }
        try Self.persist(
            entry, id: id, order: order, in: store, state: state, running: running,
            flushingDirectory: flushingDirectory,
            onlyIfPresent: !creating)
    }

    /// ``persist(_:state:running:flushingDirectory:)`` for an entry at `order`, also from `deinit`.
    ///
    /// `onlyIfPresent`: nothing is written unless the store holds the download's record (see
    /// ``TaskStore/save(_:running:keepingCheckpoint:flushingDirectory:onlyIfPresent:)``).
    private static func persist(
        _ entry: Entry, id: TaskID, order: Int64, in store: TaskStore, state: TaskRecord.State?, running: Bool?,
        flushingDirectory: Bool = true, onlyIfPresent: Bool = false
    ) throws(ResumableError) {
        let current = store.record(id)
        let record = TaskRecord(
            id: id, url: entry.url, destination: entry.destination, priority: entry.priority, order: order,
            state: state ?? current?.state ?? .queued, expectedSHA256: entry.expectedSHA256,
            token: current?.token ?? entry.token, failure: entry.failure?.message,
            checkpointedAt: current?.checkpointedAt, bytesPerSecond: current?.bytesPerSecond)
        // The store's token as of the write, not of `current`: a checkpoint may land in between.
        try store.save(
            record, running: running ?? store.isRunning(id), keepingCheckpoint: true,
            flushingDirectory: flushingDirectory, onlyIfPresent: onlyIfPresent)
    }

    /// Removes the copy of `token`'s temporary file that a finish across file systems, interrupted before its rename,
    /// left beside `destination` (``PartialFile/move(to:replacing:)``: the copy has the temporary file's name). The
    /// finish that follows may not meet it: the store moved onto the destination's file system (a rename), or the file
    /// changed on the server (a new temporary file, a new name). Best effort, and never a file a download holds.
    private static func removeLeftoverCopy(of token: ResumeToken, beside destination: DownloadTask.Destination) {
        let name = (token.tempPath as NSString).lastPathComponent
        guard TemporaryFileName.isValid(name) else { return }
        let candidate = (destination.directoryPath as NSString).appendingPathComponent(name)
        guard
            !URL(fileURLWithPath: candidate).standardizedFileURL.path.utf8.elementsEqual(
                URL(fileURLWithPath: token.tempPath).standardizedFileURL.path.utf8)
        else { return }
        try? PartialFile.removeLeftoverCopy(at: candidate)
    }

    /// Removes the temporary file a cancelled download's token names, when it is the store's.
    private func discardTemporaryFile(of token: ResumeToken?) {
        guard let store else { return }
        Self.discardTemporaryFile(of: token, in: store)
    }

    /// ``discardTemporaryFile(of:)`` for `store`, also from `deinit`: only a file of the store's `partial/`, and only
    /// when nobody holds it (``TaskStore/removeUnownedTemporaryFiles(keeping:only:)``).
    private static func discardTemporaryFile(of token: ResumeToken?, in store: TaskStore) {
        guard let token else { return }
        let path = token.tempPath
        // Byte for byte: a directory whose name is only canonically equivalent to `partial/` is another one.
        guard (path as NSString).deletingLastPathComponent.utf8.elementsEqual(store.partialPath.utf8),
            TemporaryFileName.isValid((path as NSString).lastPathComponent)
        else { return }
        store.removeUnownedTemporaryFiles(keeping: [], only: path)
    }

    private static func host(of url: URL) -> String {
        HTTPURL.origin(of: url)
    }
}
