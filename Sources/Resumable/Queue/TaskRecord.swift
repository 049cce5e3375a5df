import Foundation

/// What a ``TaskStore`` keeps of one unfinished download: enough for ``DownloadQueue`` to bring it back where its
/// last checkpoint says. One JSON file per download; the format is versioned and documented in
/// `docs/task-store.md`.
struct TaskRecord: Sendable, Equatable {
    /// What the queue does with the download after a restart.
    enum State: String, Sendable, Equatable {
        /// Waiting or running when last written: it starts again when its turn comes.
        case queued
        /// Paused: it waits for ``DownloadQueue/resume(_:)``.
        case paused
        /// It failed in a way that can be resumed (its token is kept); it waits for a resume, like a paused one.
        case failed
    }

    static let currentVersion = 1
    /// The largest `order` and `priority` magnitude a record may hold: 2^53, exact in any JSON reader.
    static let maximumOrder: Int64 = 1 << 53

    /// Whether a record can hold, and read back, a destination in its token form: an absolute path, without NUL,
    /// under the system's limit of 4,096.
    static func canHold(destination path: String) -> Bool {
        path.hasPrefix("/") && !path.contains("\0") && path.count < 4096
    }

    /// The fields, on the heap and shared by the copies of a record until one of them changes (copy on write).
    ///
    /// A store keeps each record twice (as last written, and as on disk) and a restore passes them through arrays
    /// and a sort: inline, the fields (a token is most of them) cost ≈ 370 bytes in every one of those places,
    /// ≈ 6 MiB per dictionary of 10,000 records, since a dictionary also has a quarter of its slots empty.
    private final class Storage: @unchecked Sendable {
        // Mutated only through `unique()`, by a record holding the only reference: unshared, so `Sendable`.
        var id: DownloadQueue.TaskID
        var url: URL
        var destination: DownloadTask.Destination
        var priority: Int
        var order: Int64
        var state: State
        var expectedSHA256: String?
        var token: ResumeToken?
        var failure: String?
        var checkpointedAt: Date?
        var bytesPerSecond: Int64?

        init(
            id: DownloadQueue.TaskID, url: URL, destination: DownloadTask.Destination, priority: Int, order: Int64,
            state: State, expectedSHA256: String?, token: ResumeToken?, failure: String?, checkpointedAt: Date?,
            bytesPerSecond: Int64?
        ) {
            self.id = id
            self.url = url
            self.destination = destination
            self.priority = priority
            self.order = order
            self.state = state
            self.expectedSHA256 = expectedSHA256
            self.token = token
            self.failure = failure
            self.checkpointedAt = checkpointedAt
            self.bytesPerSecond = bytesPerSecond
        }

        func copy() -> Storage {
            Storage(
                id: id, url: url, destination: destination, priority: priority, order: order, state: state,
                expectedSHA256: expectedSHA256, token: token, failure: failure, checkpointedAt: checkpointedAt,
                bytesPerSecond: bytesPerSecond)
        }
    }

    private var storage: Storage

    init(
        id: DownloadQueue.TaskID, url: URL, destination: DownloadTask.Destination, priority: Int, order: Int64,
        state: State, expectedSHA256: String? = nil, token: ResumeToken? = nil, failure: String? = nil,
        checkpointedAt: Date? = nil, bytesPerSecond: Int64? = nil
    ) {
        storage = Storage(
            id: id, url: url, destination: destination, priority: priority, order: order, state: state,
            expectedSHA256: expectedSHA256, token: token, failure: failure.map(Self.bounded),
            checkpointedAt: checkpointedAt,
            bytesPerSecond: bytesPerSecond)
    }

    /// The longest failure message a record keeps, in UTF-8 bytes: a message may quote what a server sent, and a
    /// record must stay far below the 1 MiB ``TaskStore`` reads back.
    static let maximumFailureLength = 4096

    /// `message` cut to ``maximumFailureLength`` bytes at a character boundary, with an ellipsis.
    static func bounded(_ message: String) -> String {
        guard message.utf8.count > maximumFailureLength else { return message }
        var kept = Substring(message)
        while kept.utf8.count > maximumFailureLength - 3 {
            kept = kept.dropLast(max(1, (kept.utf8.count - maximumFailureLength) / 4))
        }
        return kept + "…"
    }

    /// The storage, copied first when another record shares it.
    private mutating func unique() -> Storage {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
        return storage
    }

    var id: DownloadQueue.TaskID {
        get { storage.id }
        set { unique().id = newValue }
    }
    var url: URL {
        get { storage.url }
        set { unique().url = newValue }
    }
    var destination: DownloadTask.Destination {
        get { storage.destination }
        set { unique().destination = newValue }
    }
    var priority: Int {
        get { storage.priority }
        set { unique().priority = newValue }
    }
    /// Its place within its priority.
    var order: Int64 {
        get { storage.order }
        set { unique().order = newValue }
    }
    var state: State {
        get { storage.state }
        set { unique().state = newValue }
    }
    var expectedSHA256: String? {
        get { storage.expectedSHA256 }
        set { unique().expectedSHA256 = newValue }
    }
    /// The last checkpoint or pause token; `nil` until a byte is on disk.
    var token: ResumeToken? {
        get { storage.token }
        set { unique().token = newValue }
    }
    /// Why it failed, for ``State/failed``.
    var failure: String? {
        get { storage.failure }
        set { unique().failure = newValue.map(Self.bounded) }
    }
    /// When the last checkpoint of a running download was written.
    var checkpointedAt: Date? {
        get { storage.checkpointedAt }
        set { unique().checkpointedAt = newValue }
    }
    /// A running download's rate between its last two checkpoints; `nil` once it stopped running.
    var bytesPerSecond: Int64? {
        get { storage.bytesPerSecond }
        set { unique().bytesPerSecond = newValue }
    }

    static func == (lhs: TaskRecord, rhs: TaskRecord) -> Bool {
        if lhs.storage === rhs.storage { return true }
        let (l, r) = (lhs.storage, rhs.storage)
        return l.id == r.id && l.url == r.url && l.destination == r.destination && l.priority == r.priority
            && l.order == r.order && l.state == r.state && l.expectedSHA256 == r.expectedSHA256 && l.token == r.token
            && l.failure == r.failure && l.checkpointedAt == r.checkpointedAt && l.bytesPerSecond == r.bytesPerSecond
    }
}

extension TaskRecord: Codable {
    private enum Keys: String, CodingKey {
        case version, id, url, destination, priority, order, state, expectedSHA256, token, failure
        case checkpointedAt, bytesPerSecond
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Keys.self)
        let version = try container.decode(Int.self, forKey: .version)
        guard version == Self.currentVersion else {
            throw ResumableError(
                version > Self.currentVersion ? .newerTokenVersion : .invalidToken,
                "task record version \(version); this library reads version \(Self.currentVersion)")
        }
        guard let id = DownloadQueue.TaskID(try container.decode(String.self, forKey: .id)) else {
            throw ResumableError.invalidToken(field: "id", "is not a task identifier")
        }
        let urlText = try container.decode(String.self, forKey: .url)
        guard let url = URL(string: urlText), HTTPURL.isSupported(url) else {
            throw ResumableError.invalidToken(field: "url", "is not an http or https URL")
        }
        // The token's form: an absolute path; a directory ends in `/`.
        let path = try container.decode(String.self, forKey: .destination)
        guard Self.canHold(destination: path) else {
            throw ResumableError.invalidToken(field: "destination", "is not an absolute path")
        }
        let destination = DownloadTask.Destination(tokenValue: path, tempPath: path)
        guard let state = State(rawValue: try container.decode(String.self, forKey: .state)) else {
            throw ResumableError.invalidToken(field: "state", "is not queued, paused or failed")
        }
        let digest = try container.decodeIfPresent(String.self, forKey: .expectedSHA256)
        if let digest, SHA256Digest.normalized(digest) != digest {
            throw ResumableError.invalidToken(field: "expectedSHA256", "is not 64 lowercase hexadecimal digits")
        }
        let order = try container.decode(Int64.self, forKey: .order)
        // A place, not arithmetic fodder: far from the ends of Int64, so moving and appending never overflow.
        guard (-Self.maximumOrder...Self.maximumOrder).contains(order) else {
            throw ResumableError.invalidToken(field: "order", "is beyond ±\(Self.maximumOrder)")
        }
        let priority = try container.decode(Int.self, forKey: .priority)
        guard (-Self.maximumOrder...Self.maximumOrder).contains(Int64(priority)) else {
            throw ResumableError.invalidToken(field: "priority", "is beyond ±\(Self.maximumOrder)")
        }
        let token = try container.decodeIfPresent(ResumeToken.self, forKey: .token)
        let failure = try container.decodeIfPresent(String.self, forKey: .failure)
        var checkpointedAt: Date?
        if let text = try container.decodeIfPresent(String.self, forKey: .checkpointedAt) {
            guard let date = ISO8601.parse(text) else {
                throw ResumableError.invalidToken(field: "checkpointedAt", "is not an RFC 3339 date-time")
            }
            checkpointedAt = date
        }
        let rate = try container.decodeIfPresent(Int64.self, forKey: .bytesPerSecond)
        if let rate, !(0...Self.maximumOrder).contains(rate) {
            throw ResumableError.invalidToken(field: "bytesPerSecond", "is not between 0 and \(Self.maximumOrder)")
        }
        self.init(
            id: id, url: url, destination: destination, priority: priority, order: order, state: state,
            expectedSHA256: digest, token: token, failure: failure, checkpointedAt: checkpointedAt,
            bytesPerSecond: rate)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(Self.currentVersion, forKey: .version)
        try container.encode(id.description, forKey: .id)
        try container.encode(url.absoluteString, forKey: .url)
        try container.encode(destination.tokenValue, forKey: .destination)
        try container.encode(priority, forKey: .priority)
        try container.encode(order, forKey: .order)
        try container.encode(state.rawValue, forKey: .state)
        try container.encodeIfPresent(expectedSHA256, forKey: .expectedSHA256)
        try container.encodeIfPresent(token, forKey: .token)
        try container.encodeIfPresent(failure, forKey: .failure)
        try container.encodeIfPresent(checkpointedAt.map(ISO8601.format), forKey: .checkpointedAt)
        try container.encodeIfPresent(bytesPerSecond, forKey: .bytesPerSecond)
    }
}
