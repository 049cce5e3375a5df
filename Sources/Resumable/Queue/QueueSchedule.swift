/// Which of a queue's downloads run: a pure value type with no I/O.
///
/// ``DownloadQueue`` owns one and performs the ``Action``s its mutating methods return. Downloads wait in order
/// of priority (higher first), first in, first out within a priority; one starts whenever fewer than
/// ``Limits/concurrent`` run in all and fewer than ``Limits/perHost`` run on its host. A paused download keeps its
/// place in the order but never starts until resumed; a download that ended leaves the schedule.
struct QueueSchedule: Sendable {
    /// What the owner must do.
    enum Action: Hashable, Sendable {
        /// Start (or continue, from its token) this download.
        case start(DownloadQueue.TaskID)
        /// Pause this running download into a token.
        case pause(DownloadQueue.TaskID)
        /// Stop this running download and discard its bytes.
        case cancel(DownloadQueue.TaskID)
    }

    struct Limits: Hashable, Sendable {
        /// Downloads running at once, in all.
        var concurrent: Int
        /// Downloads running at once on one host (scheme, host and port).
        var perHost: Int
    }

    enum Phase: Hashable, Sendable {
        case waiting
        case running
        /// Asked to pause while running: the owner pauses it, then reports ``ended(_:)``.
        case pausing
        case paused
    }

    private struct Entry: Sendable {
        var host: String
        var priority: Int
        /// Position within its priority: smaller first.
        var order: Int64
        var phase: Phase
    }

    private(set) var limits: Limits
    /// Set by ``suspend()``: nothing starts until ``unsuspend()``.
    private(set) var isSuspended = false
    private var entries: [DownloadQueue.TaskID: Entry] = [:]
    private var nextOrder: Int64 = 0
    /// The running and pausing downloads and their hosts, and how many per host: kept as they change, so that
    /// neither counting them nor a start that finds no free slot (every add to a full queue) passes over every entry.
    private var active: [DownloadQueue.TaskID: String] = [:]
    private var activePerHost: [String: Int] = [:]

    init(limits: Limits) {
        self.limits = Self.valid(limits)
    }

    private static func valid(_ limits: Limits) -> Limits {
        Limits(concurrent: max(1, limits.concurrent), perHost: max(1, limits.perHost))
    }

    /// The download's phase, or `nil` when it is not (or no longer) in the schedule.
    func phase(of id: DownloadQueue.TaskID) -> Phase? { entries[id]?.phase }

    /// The downloads in the schedule, in the order they start: priority, then first in first.
    var order: [DownloadQueue.TaskID] {
        entries.sorted { lhs, rhs in
            lhs.value.priority != rhs.value.priority
                ? lhs.value.priority > rhs.value.priority : lhs.value.order < rhs.value.order
        }.map(\.key)
    }

    /// How many downloads the schedule holds, in any phase.
    var count: Int { entries.count }

    /// Whether any download waits, runs or is pausing: one pass without sorting, usually ending at the first entry
    /// (``order`` sorts them all, which the queue must not do after every change of a queue of thousands).
    var hasUnpaused: Bool { entries.values.contains { $0.phase != .paused } }

    /// How many run (pausing ones included: their connections are still open).
    var runningCount: Int { active.count }

    // MARK: - Changes

    /// Adds a download, waiting or paused, behind those of its priority; `order` keeps a restored download's place.
    mutating func add(
        _ id: DownloadQueue.TaskID, host: String, priority: Int, paused: Bool, order: Int64? = nil
    ) -> [Action] {
        guard entries[id] == nil else { return [] }
        let position = order ?? nextOrder
        nextOrder = max(nextOrder, position) + 1
        entries[id] = Entry(host: host, priority: priority, order: position, phase: paused ? .paused : .waiting)
        return fill()
    }

    /// The position a new download would get; for the owner to persist with it.
    func orderOf(_ id: DownloadQueue.TaskID) -> Int64? { entries[id]?.order }

    /// Pauses a download: a waiting one stays where it is without starting; a running one is paused by the owner.
    mutating func pause(_ id: DownloadQueue.TaskID) -> [Action] {
        guard let entry = entries[id] else { return [] }
        switch entry.phase {
        case .waiting:
            entries[id]?.phase = .paused
            return []
        case .running:
            entries[id]?.phase = .pausing
            return [.pause(id)]
        case .pausing, .paused:
            return []
        }
    }

    /// Lets a paused download start again when its turn comes.
    mutating func resume(_ id: DownloadQueue.TaskID) -> [Action] {
        guard entries[id]?.phase == .paused else { return [] }
        entries[id]?.phase = .waiting
        return fill()
    }

    /// Removes a download; a running one is stopped by the owner.
    mutating func cancel(_ id: DownloadQueue.TaskID) -> [Action] {
        guard let entry = entries.removeValue(forKey: id) else { return [] }
        leaveActive(id)
        let stop: [Action] = entry.phase == .running || entry.phase == .pausing ? [.cancel(id)] : []
        return stop + fill()
    }

    /// A running download ended. `paused`: it stopped with a token and stays in the schedule, paused (it was
    /// asked to, or it failed in a way that can be resumed later); otherwise it leaves the schedule.
    mutating func ended(_ id: DownloadQueue.TaskID, paused: Bool) -> [Action] {
        guard entries[id] != nil else { return fill() }
        leaveActive(id)
        if paused {
            entries[id]?.phase = .paused
        } else {
            entries[id] = nil
        }
        return fill()
    }

    /// Changes a download's priority; it goes behind the others of its new priority.
    mutating func setPriority(_ id: DownloadQueue.TaskID, _ priority: Int) -> [Action] {
        guard entries[id] != nil else { return [] }
        entries[id]?.priority = priority
        entries[id]?.order = nextOrder
        nextOrder += 1
        return fill()
    }

    /// Moves a download to the front of its priority.
    mutating func moveToFront(_ id: DownloadQueue.TaskID) -> [Action] {
        guard let entry = entries[id] else { return [] }
        let first = entries.values.filter { $0.priority == entry.priority }.map(\.order).min() ?? entry.order
        entries[id]?.order = min(entry.order, first - 1)
        return fill()
    }

    /// Changes the limits; more room starts waiting downloads at once, less lets running ones finish.
    mutating func setLimits(_ limits: Limits) -> [Action] {
        self.limits = Self.valid(limits)
        return fill()
    }

    /// Stops starting downloads and pauses the running ones; waiting ones keep their place and phase.
    mutating func suspend() -> [Action] {
        isSuspended = true
        var actions: [Action] = []
        for (id, entry) in entries where entry.phase == .running {
            entries[id]?.phase = .pausing
            actions.append(.pause(id))
        }
        return actions
    }

    /// Lets waiting downloads start again.
    mutating func unsuspend() -> [Action] {
        isSuspended = false
        return fill()
    }

    // MARK: - Starting

    /// Starts waiting downloads, in order, while the limits allow. A download whose host is full does not hold
    /// back the ones behind it on other hosts. Each free slot costs one pass over the entries, without sorting:
    /// a queue of 10,000 that starts one download when one ends stays linear.
    private mutating func fill() -> [Action] {
        guard !isSuspended, active.count < limits.concurrent else { return [] }
        var actions: [Action] = []
        while active.count < limits.concurrent {
            var best: (id: DownloadQueue.TaskID, entry: Entry)?
            for (id, entry) in entries where entry.phase == .waiting {
                if let current = best?.entry,
                    current.priority > entry.priority
                        || (current.priority == entry.priority && current.order < entry.order)
                {
                    continue
                }
                // The host's count (a hash of its name) only for an entry that would be the best so far: a few per
                // pass, not one per waiting entry.
                guard activePerHost[entry.host, default: 0] < limits.perHost else { continue }
                best = (id, entry)
            }
            guard let (id, entry) = best else { break }
            entries[id]?.phase = .running
            active[id] = entry.host
            activePerHost[entry.host, default: 0] += 1
            actions.append(.start(id))
        }
        return actions
    }

    /// `id` is no longer running or pausing.
    private mutating func leaveActive(_ id: DownloadQueue.TaskID) {
        guard let host = active.removeValue(forKey: id) else { return }
        let left = (activePerHost[host] ?? 1) - 1
        activePerHost[host] = left > 0 ? left : nil
    }
}
