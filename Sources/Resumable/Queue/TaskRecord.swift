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

    var id: DownloadQueue.TaskID
    var url: URL
    var destination: DownloadTask.Destination
    var priority: Int
    /// Its place within its priority.
    var order: Int64
    var state: State
    var expectedSHA256: String?
    /// The last checkpoint or pause token; `nil` until a byte is on disk.
    var token: ResumeToken?
    /// Why it failed, for ``State/failed``.
    var failure: String?
    /// When the last checkpoint of a running download was written.
    var checkpointedAt: Date?
    /// A running download's rate between its last two checkpoints; `nil` once it stopped running.
    var bytesPerSecond: Int64?
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
        guard path.hasPrefix("/"), !path.contains("\0"), path.count < 4096 else {
            throw ResumableError.invalidToken(field: "destination", "is not an absolute path")
        }
        destination = DownloadTask.Destination(tokenValue: path, tempPath: path)
        guard let state = State(rawValue: try container.decode(String.self, forKey: .state)) else {
            throw ResumableError.invalidToken(field: "state", "is not queued, paused or failed")
        }
        let digest = try container.decodeIfPresent(String.self, forKey: .expectedSHA256)
        if let digest, SHA256Digest.normalized(digest) != digest {
            throw ResumableError.invalidToken(field: "expectedSHA256", "is not 64 lowercase hexadecimal digits")
        }
        self.id = id
        self.url = url
        let order = try container.decode(Int64.self, forKey: .order)
        // A place, not arithmetic fodder: far from the ends of Int64, so moving and appending never overflow.
        guard (-Self.maximumOrder...Self.maximumOrder).contains(order) else {
            throw ResumableError.invalidToken(field: "order", "is beyond ±\(Self.maximumOrder)")
        }
        self.order = order
        let priority = try container.decode(Int.self, forKey: .priority)
        guard (-Self.maximumOrder...Self.maximumOrder).contains(Int64(priority)) else {
            throw ResumableError.invalidToken(field: "priority", "is beyond ±\(Self.maximumOrder)")
        }
        self.priority = priority
        self.state = state
        self.expectedSHA256 = digest
        self.token = try container.decodeIfPresent(ResumeToken.self, forKey: .token)
        self.failure = try container.decodeIfPresent(String.self, forKey: .failure)
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
        bytesPerSecond = rate
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
