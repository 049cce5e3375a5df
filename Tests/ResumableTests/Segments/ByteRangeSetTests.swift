import Testing

@testable import Resumable

@Suite("ByteRangeSet: the bytes known to be in a file")
struct ByteRangeSetTests {
    @Test("Inserting merges overlapping and touching ranges and keeps them sorted")
    func insertMerges() {
        var set = ByteRangeSet([10..<20, 0..<5])
        #expect(set.ranges == [0..<5, 10..<20])
        set.insert(5..<10)
        #expect(set.ranges == [0..<20])
        set.insert(30..<40)
        set.insert(25..<35)
        set.insert(19..<21)
        set.insert(50..<50)
        #expect(set.ranges == [0..<21, 25..<40])
        #expect(set.count == 36)
        #expect(set.prefixLength == 21)
        #expect(set.rangesAfterPrefix == [25..<40])
    }

    @Test("Random inserts and sets built at once agree with a byte-by-byte model: sorted, disjoint, never touching")
    func agreesWithModel() {
        var state: UInt64 = 0x2545_F491_4F6C_DD1D
        func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        for _ in 0..<400 {
            var model = [Bool](repeating: false, count: 160)
            var set = ByteRangeSet()
            var inserted: [Range<Int64>] = []
            for _ in 0..<next(24) {
                let start = next(150)
                let range = Int64(start)..<Int64(start + next(12))
                inserted.append(range)
                set.insert(range)
                for byte in range { model[Int(byte)] = true }
            }
            var expected: [Range<Int64>] = []
            var byte = 0
            while byte < model.count {
                if model[byte] {
                    let start = byte
                    while byte < model.count, model[byte] { byte += 1 }
                    expected.append(Int64(start)..<Int64(byte))
                } else {
                    byte += 1
                }
            }
            #expect(set.ranges == expected, "inserted \(inserted)")
            #expect(ByteRangeSet(inserted).ranges == expected, "built from \(inserted)")
            #expect(ByteRangeSet(inserted.reversed()).ranges == expected, "built from \(inserted.reversed())")
        }
    }

    @Test("Gaps are what is missing within a range; clipping drops bytes beyond a length")
    func gapsAndClip() {
        var set = ByteRangeSet([0..<10, 20..<30, 40..<50])
        #expect(set.gaps(in: 0..<60) == [10..<20, 30..<40, 50..<60])
        #expect(set.gaps(in: 25..<45) == [30..<40])
        #expect(set.gaps(in: 0..<10).isEmpty)
        #expect(set.contains(20..<30) && !set.contains(20..<31))
        set.clip(to: 25)
        #expect(set.ranges == [0..<10, 20..<25])
        #expect(ByteRangeSet([5..<9]).prefixLength == 0)
    }
}

@Suite("SegmentSchedule: who fetches which bytes")
struct SegmentScheduleTests {
    static let mebibyte: Int64 = 1 << 20

    func schedule(
        total: Int64 = 16 << 20, present: ByteRangeSet = ByteRangeSet(), probe: Range<Int64>? = nil,
        connections: DownloadTask.Connections = .fixed(4), stall: Duration = .seconds(5),
        now: ContinuousClock.Instant = .now
    ) -> SegmentSchedule {
        let basis = ResumeStateMachine.SegmentBasis(
            present: present, probe: probe ?? (present.prefixLength..<total), total: total)
        let settings = SegmentSchedule.Settings(
            connections: connections, minimumSegmentLength: Self.mebibyte, stallTimeout: stall)
        return SegmentSchedule(basis: basis, settings: settings, probeConnection: 0, now: now)
    }

    /// The automatic count's warm-up: the probe's first 512 KiB are not measured; the first window starts at `now`.
    func warmUp(_ schedule: inout SegmentSchedule, now: ContinuousClock.Instant) {
        _ = schedule.wrote(connection: 0, count: 512 << 10, now: now)
        #expect(schedule.tick(now: now).actions.isEmpty)
    }

    static func requests(_ actions: [SegmentSchedule.Action]) -> [Int: Range<Int64>] {
        var result: [Int: Range<Int64>] = [:]
        for case .request(let id, let range) in actions { result[id] = range }
        return result
    }

    @Test("Four connections split the file evenly; the first answer keeps the first quarter")
    func evenSplit() {
        var schedule = schedule()
        let requests = Self.requests(schedule.start().actions)
        let mib = Self.mebibyte
        let expected: [Int: Range<Int64>] = [
            1: (4 * mib)..<(8 * mib), 2: (8 * mib)..<(12 * mib), 3: (12 * mib)..<(16 * mib),
        ]
        #expect(requests == expected)
        #expect(schedule.placement(connection: 0, count: 100)?.position == 0)
        // The first connection stops at its quarter even though its answer goes on.
        #expect(schedule.placement(connection: 0, count: Int(5 << 20))?.count == Int(4 << 20))
    }

    @Test("A connection that finished takes half of the largest remaining segment")
    func workStealing() {
        var schedule = schedule(total: 8 << 20, connections: .fixed(2))
        let first = Self.requests(schedule.start().actions)
        #expect(first == [1: (4 << 20)..<(8 << 20)])
        let accepted = schedule.head(connection: 1, verdict: .join(end: 8 << 20))
        let complete = schedule.wrote(connection: 1, count: Int(4 << 20))
        #expect(accepted && complete)
        let step = schedule.ended(connection: 1, error: nil)
        // Connection 0 has written nothing of its 4 MiB: the newcomer takes the second half of it.
        let expected: [Int: Range<Int64>] = [2: (2 * Self.mebibyte)..<(4 * Self.mebibyte)]
        #expect(Self.requests(step.actions) == expected)
        #expect(schedule.placement(connection: 0, count: 3 << 20)?.count == 2 << 20)
        #expect(step.end == nil)
    }

    @Test("Nothing is stolen below twice the minimum segment length")
    func noTinySteals() {
        var schedule = schedule(total: 3 << 20, connections: .fixed(2))
        _ = schedule.start()
        // 1.5 MiB each: a finished connection finds less than 2 MiB left in the other and takes nothing.
        let accepted = schedule.head(connection: 1, verdict: .join(end: 3 << 20))
        let half = Int(3 << 19)
        let complete = schedule.wrote(connection: 1, count: half)
        let afterFirst = schedule.ended(connection: 1, error: nil)
        #expect(accepted && complete && Self.requests(afterFirst.actions).isEmpty)
        let secondComplete = schedule.wrote(connection: 0, count: half)
        #expect(secondComplete)
        let end = schedule.ended(connection: 0, error: nil).end
        guard case .complete = end else {
            Issue.record("expected the phase to be complete, got \(String(describing: end))")
            return
        }
    }

    @Test("At the end, a connection that finished takes half of a slow segment's rest, under the minimum length")
    func endgameSplitsASlowSegment() {
        let start = ContinuousClock.now
        var schedule = schedule(total: 3 << 20, connections: .fixed(2), now: start)
        let first = Self.requests(schedule.start(now: start).actions)
        #expect(first == [1: (3 << 19)..<(3 << 20)])
        // The probe brought 256 KiB, then slowed down; the newcomer answered in 2 ms and brought its 1.5 MiB.
        _ = schedule.wrote(connection: 0, count: 256 << 10, now: start + .milliseconds(1))
        _ = schedule.head(connection: 1, verdict: .join(end: 3 << 20), now: start + .milliseconds(2))
        let complete = schedule.wrote(connection: 1, count: Int(3 << 19), now: start + .milliseconds(2))
        #expect(complete)
        // 1.25 MiB left to the probe: under two minimum segments, but at its rate it takes half a second, against a
        // request's 2 ms. The finished connection takes the second half.
        let step = schedule.ended(connection: 1, error: nil, now: start + .milliseconds(100))
        let expected: [Int: Range<Int64>] = [2: (896 << 10)..<(3 << 19)]
        #expect(Self.requests(step.actions) == expected)
        #expect(schedule.placement(connection: 0, count: 1 << 20)?.count == 640 << 10)
    }

    @Test("A segment about to end is not split at the end; once it is slow for long enough, a tick splits it")
    func endgameWaitsForASlowEnough() {
        let start = ContinuousClock.now
        var schedule = schedule(total: 3 << 20, connections: .fixed(2), now: start)
        _ = schedule.start(now: start)
        // A request takes 50 ms here; the probe brought 1.25 MiB in 99 ms: its last 256 KiB take about 20 ms.
        _ = schedule.wrote(connection: 0, count: 256 << 10, now: start + .milliseconds(1))
        _ = schedule.head(connection: 1, verdict: .join(end: 3 << 20), now: start + .milliseconds(50))
        let complete = schedule.wrote(connection: 1, count: Int(3 << 19), now: start + .milliseconds(50))
        #expect(complete)
        _ = schedule.wrote(connection: 0, count: 1 << 20, now: start + .milliseconds(100))
        let step = schedule.ended(connection: 1, error: nil, now: start + .milliseconds(100))
        #expect(step.actions.isEmpty, "a new request would end after the segment")
        #expect(schedule.tick(now: start + .milliseconds(150)).actions.isEmpty)
        // Nothing more for two seconds: at the rate it brought bytes so far, its rest now takes 400 ms.
        let later = schedule.tick(now: start + .seconds(2))
        let expected: [Int: Range<Int64>] = [2: ((5 << 18) + (128 << 10))..<(3 << 19)]
        #expect(Self.requests(later.actions) == expected)
        // A rest under two end-game pieces is not split again.
        let again = schedule.tick(now: start + .milliseconds(2500))
        #expect(again.actions.isEmpty)
    }

    @Test("An overloaded answer lowers the count; the range goes to a working connection later")
    func overloadLowersTheCount() {
        var schedule = schedule()
        _ = schedule.start()
        let overloaded = ResumableError(.httpStatus, "503", httpStatus: 503)
        let accepted = schedule.head(connection: 3, verdict: .overloaded(overloaded))
        #expect(!accepted)
        let step = schedule.ended(connection: 3, error: nil)
        #expect(step.end == nil)
        #expect(step.failure?.remaining == (12 << 20)..<(16 << 20))
        #expect(Self.requests(step.actions).isEmpty)
        #expect(schedule.target == 3)
        // When connection 1 finishes, it takes the range the overloaded one left.
        _ = schedule.head(connection: 1, verdict: .join(end: 8 << 20))
        _ = schedule.wrote(connection: 1, count: Int(4 << 20))
        let taken = Self.requests(schedule.ended(connection: 1, error: nil).actions)
        #expect(taken.values.first?.lowerBound == 12 * Self.mebibyte)
    }

    @Test("Twelve 503s in a row for the connections beyond a limit of four lower the count; the four go on")
    func manyOverloadsAreOneAnswer() {
        var schedule = schedule(total: 64 << 20, connections: .fixed(16))
        let started = Self.requests(schedule.start().actions)
        #expect(started.count == 15)
        let overloaded = ResumableError(.httpStatus, "503", httpStatus: 503)
        // Connections 1, 2 and 3 are accepted (with 0, the limit of four); the twelve others are refused before
        // any byte arrives anywhere.
        for id in 1...3 {
            _ = schedule.head(connection: id, verdict: .join(end: started[id]!.upperBound))
        }
        for id in 4...15 {
            _ = schedule.head(connection: id, verdict: .overloaded(overloaded))
            let step = schedule.ended(connection: id, error: nil)
            #expect(step.end == nil, "connection \(id)")
            #expect(Self.requests(step.actions).isEmpty, "no connection beyond those working")
        }
        #expect(schedule.target == 4)
        #expect(schedule.activeCount == 4)
    }

    @Test("A changed file ends the phase with a restart and stops every connection")
    func changedFileRestarts() {
        var schedule = schedule()
        _ = schedule.start()
        let accepted = schedule.head(connection: 2, verdict: .fileChanged(.representationChanged))
        #expect(!accepted)
        let step = schedule.ended(connection: 2, error: nil)
        guard case .restart(.representationChanged) = step.end else {
            Issue.record("expected a restart, got \(String(describing: step.end))")
            return
        }
        #expect(Set(step.actions) == [.stop(connection: 0), .stop(connection: 1), .stop(connection: 3)])
    }

    @Test("The last working connection failing ends the phase to back off")
    func lastFailureRetries() {
        var schedule = schedule(total: 4 << 20, connections: .single)
        let started = schedule.start()
        #expect(started.actions.isEmpty)
        let step = schedule.ended(connection: 0, error: ResumableError(.network, "reset"))
        guard case .retry = step.end else {
            Issue.record("expected a retry, got \(String(describing: step.end))")
            return
        }
    }

    @Test(
        "A segment with no bytes for the stall timeout while the others wrote a minimum segment is stopped and asked again"
    )
    func stalls() {
        let start = ContinuousClock.now
        var schedule = schedule(total: 8 << 20, connections: .fixed(2), stall: .seconds(1), now: start)
        _ = schedule.start(now: start)
        _ = schedule.head(connection: 1, verdict: .join(end: 8 << 20), now: start)
        _ = schedule.wrote(connection: 1, count: 1000, now: start + .milliseconds(1500))
        // Connection 1 answered later than connection 0 and wrote less than a minimum segment since: a busy
        // machine, not a stuck connection.
        #expect(schedule.tick(now: start + .milliseconds(1600)).actions.isEmpty)
        _ = schedule.wrote(connection: 1, count: Int(Self.mebibyte) - 1000, now: start + .milliseconds(1700))
        let tick = schedule.tick(now: start + .milliseconds(1800))
        #expect(tick.actions == [.stop(connection: 0)])
        let step = schedule.ended(connection: 0, error: ResumableError(.cancelled, "stopped"))
        #expect(step.failure?.remaining == 0..<(4 * Self.mebibyte))
        #expect(step.failure?.error.code == .timedOut)
        let expected: [Int: Range<Int64>] = [2: 0..<(4 * Self.mebibyte)]
        #expect(Self.requests(step.actions) == expected)
    }

    @Test("The automatic count tries four, goes to the most when four brought four times the rate, and goes back")
    func automaticRamp() {
        let start = ContinuousClock.now
        var schedule = schedule(total: 64 << 20, connections: .automatic, now: start)
        let started = schedule.start(now: start)
        #expect(started.actions.isEmpty)
        warmUp(&schedule, now: start)
        _ = schedule.wrote(connection: 0, count: 1 << 20, now: start + .milliseconds(100))
        let up = Self.requests(schedule.tick(now: start + .milliseconds(100)).actions)
        #expect(up.count == 3 && schedule.target == 4)
        for (id, range) in up {
            let accepted = schedule.head(
                connection: id, verdict: .join(end: range.upperBound), now: start + .milliseconds(100))
            #expect(accepted)
        }
        _ = schedule.tick(now: start + .milliseconds(110))  // measuring starts once all four receive
        // Four times the connections, four times the rate: a capped connection, so straight to the most.
        for id in [0] + Array(up.keys) {
            _ = schedule.wrote(connection: id, count: 1 << 20, now: start + .milliseconds(200))
        }
        let more = Self.requests(schedule.tick(now: start + .milliseconds(210)).actions)
        #expect(schedule.target == 16)
        #expect(more.count == 12)
        for (id, range) in more {
            _ = schedule.head(connection: id, verdict: .join(end: range.upperBound), now: start + .milliseconds(220))
        }
        _ = schedule.tick(now: start + .milliseconds(230))  // every connection receives: the window starts
        // Sixteen connections bring less than four did: back to four, the newest connections stop.
        _ = schedule.wrote(connection: 0, count: 1 << 20, now: start + .milliseconds(1300))
        let back = schedule.tick(now: start + .milliseconds(1300))
        #expect(schedule.target == 4)
        #expect(back.actions.count == 12)
        #expect(Set(back.actions) == Set(more.keys.map { SegmentSchedule.Action.stop(connection: $0) }))
    }

    @Test("After four, a step that helps without being proportional doubles; one that hurts is taken back")
    func automaticRampDoubles() {
        let start = ContinuousClock.now
        var schedule = schedule(total: 256 << 20, connections: .automatic, now: start)
        _ = schedule.start(now: start)
        warmUp(&schedule, now: start)
        _ = schedule.wrote(connection: 0, count: 1 << 20, now: start + .milliseconds(100))
        let four = Self.requests(schedule.tick(now: start + .milliseconds(100)).actions)
        for (id, range) in four {
            _ = schedule.head(connection: id, verdict: .join(end: range.upperBound), now: start + .milliseconds(100))
        }
        _ = schedule.tick(now: start + .milliseconds(110))
        // Four connections bring twice the rate of one (not four times): the link is shared, doubling may still pay.
        for id in [0] + Array(four.keys) {
            _ = schedule.wrote(connection: id, count: 512 << 10, now: start + .milliseconds(210))
        }
        let eight = Self.requests(schedule.tick(now: start + .milliseconds(210)).actions)
        #expect(schedule.target == 8)
        #expect(eight.count == 4)
        for (id, range) in eight {
            _ = schedule.head(connection: id, verdict: .join(end: range.upperBound), now: start + .milliseconds(210))
        }
        _ = schedule.tick(now: start + .milliseconds(220))
        // Eight bring less than four did (4 MiB in half a second): back to four.
        for id in [0] + Array(four.keys) + Array(eight.keys) {
            _ = schedule.wrote(connection: id, count: 512 << 10, now: start + .milliseconds(720))
        }
        let back = schedule.tick(now: start + .milliseconds(720))
        #expect(schedule.target == 4)
        #expect(Set(back.actions) == Set(eight.keys.map { SegmentSchedule.Action.stop(connection: $0) }))
    }

    @Test("The probe's first bytes are not measured: a slow start does not make four connections look proportional")
    func automaticRampWarmsUp() {
        let start = ContinuousClock.now
        var schedule = schedule(total: 64 << 20, connections: .automatic, now: start)
        _ = schedule.start(now: start)
        // A slow first half second (a new connection, a new file): 256 KiB. Nothing is decided on it.
        _ = schedule.wrote(connection: 0, count: 256 << 10, now: start + .milliseconds(500))
        #expect(schedule.tick(now: start + .milliseconds(500)).actions.isEmpty)
        _ = schedule.wrote(connection: 0, count: 256 << 10, now: start + .milliseconds(510))
        #expect(schedule.tick(now: start + .milliseconds(510)).actions.isEmpty, "the window starts only now")
        // The first window measures the connection at speed: 1 MiB in 100 ms.
        _ = schedule.wrote(connection: 0, count: 1 << 20, now: start + .milliseconds(610))
        let four = Self.requests(schedule.tick(now: start + .milliseconds(610)).actions)
        #expect(four.count == 3 && schedule.target == 4)
        for (id, range) in four {
            _ = schedule.head(connection: id, verdict: .join(end: range.upperBound), now: start + .milliseconds(610))
        }
        _ = schedule.tick(now: start + .milliseconds(620))
        // Four connections share the link: 2 MiB in 186 ms, 1.08 times the rate of one. Back to one.
        for id in [0] + Array(four.keys) {
            _ = schedule.wrote(connection: id, count: 512 << 10, now: start + .milliseconds(806))
        }
        let back = schedule.tick(now: start + .milliseconds(806))
        #expect(schedule.target == 1)
        #expect(Set(back.actions) == Set(four.keys.map { SegmentSchedule.Action.stop(connection: $0) }))
    }

    @Test("The warm-up ends at the write that completes it: a burst server's first window is not a tick late")
    func automaticRampWarmUpEndsAtItsWrite() {
        let start = ContinuousClock.now
        var schedule = schedule(total: 64 << 20, connections: .automatic, now: start)
        _ = schedule.start(now: start)
        // nginx under `limit_rate` sends a burst (256 KiB) at once, then one every 31 ms; no tick came in between (the
        // loop was busy, or ticks had not started yet).
        _ = schedule.wrote(connection: 0, count: 256 << 10, now: start + .milliseconds(1))
        _ = schedule.wrote(connection: 0, count: 256 << 10, now: start + .milliseconds(32))
        _ = schedule.wrote(connection: 0, count: 256 << 10, now: start + .milliseconds(63))
        // The window began with the first burst: 512 KiB in 62 ms is a measure, and the count steps up now.
        let four = Self.requests(schedule.tick(now: start + .milliseconds(63)).actions)
        #expect(four.count == 3 && schedule.target == 4)
    }

    @Test("A step that brings less than a fifth more goes back, and the next try waits twice as long")
    func automaticRampBacksOffItsTries() {
        let start = ContinuousClock.now
        var schedule = schedule(total: 1 << 30, connections: .automatic, now: start)
        _ = schedule.start(now: start)
        warmUp(&schedule, now: start)
        var now = start
        var written: Int64 = 0
        /// One connection at 10 MiB/s for `duration`, ticking every 50 ms; returns the requests made meanwhile.
        func alone(for duration: Duration) -> [Int: Range<Int64>] {
            var requests: [Int: Range<Int64>] = [:]
            let end = now + duration
            while now < end {
                now += .milliseconds(50)
                _ = schedule.wrote(connection: 0, count: 512 << 10, now: now)
                written += 512 << 10
                requests.merge(Self.requests(schedule.tick(now: now).actions)) { $1 }
            }
            return requests
        }
        /// Four connections bringing, together, 1.08 times what one did: the step does not pay.
        func fourNotPaying(_ four: [Int: Range<Int64>]) {
            for (id, range) in four {
                _ = schedule.head(connection: id, verdict: .join(end: range.upperBound), now: now)
            }
            now += .milliseconds(10)
            _ = schedule.tick(now: now)
            now += .milliseconds(186)
            for id in [0] + Array(four.keys) {
                _ = schedule.wrote(connection: id, count: 512 << 10, now: now)
            }
            let back = schedule.tick(now: now)
            #expect(schedule.target == 1)
            #expect(Set(back.actions) == Set(four.keys.map { SegmentSchedule.Action.stop(connection: $0) }))
            for id in four.keys {
                _ = schedule.ended(connection: id, error: ResumableError(.cancelled, "stopped"), now: now)
            }
        }
        let first = alone(for: .milliseconds(100))
        #expect(first.count == 3)
        fourNotPaying(first)
        // Settled at one: the next try after 2 s (measured over a window), not before.
        #expect(alone(for: .milliseconds(1900)).isEmpty)
        let second = alone(for: .milliseconds(300))
        #expect(second.count == 3, "tried again after 2 s")
        fourNotPaying(second)
        // That try did not pay either: the next one waits 4 s.
        #expect(alone(for: .milliseconds(3900)).isEmpty)
        #expect(alone(for: .milliseconds(300)).count == 3, "tried again after 4 s")
    }

    @Test("When the count grows by several, every connection is left an even share, so that all end together")
    func rampRebalances() throws {
        let start = ContinuousClock.now
        let total: Int64 = 64 << 20
        var schedule = schedule(total: total, connections: .automatic, now: start)
        _ = schedule.start(now: start)
        warmUp(&schedule, now: start)
        _ = schedule.wrote(connection: 0, count: 1 << 20, now: start + .milliseconds(100))
        let four = Self.requests(schedule.tick(now: start + .milliseconds(100)).actions)
        #expect(four.count == 3)
        for (id, range) in four {
            _ = schedule.head(connection: id, verdict: .join(end: range.upperBound), now: start + .milliseconds(100))
        }
        _ = schedule.tick(now: start + .milliseconds(110))
        let working = [0] + Array(four.keys)
        for id in working {
            _ = schedule.wrote(connection: id, count: 1 << 20, now: start + .milliseconds(200))
        }
        let more = Self.requests(schedule.tick(now: start + .milliseconds(210)).actions)
        #expect(more.count == 12)
        // What each of the sixteen has left: the four that were working gave up most of theirs.
        var left: [Int64] = more.values.map { $0.upperBound - $0.lowerBound }
        for existing in working {
            left.append(Int64(schedule.placement(connection: existing, count: .max)?.count ?? 0))
        }
        let missing = total - 5 * Self.mebibyte - (512 << 10)
        #expect(left.reduce(0, +) == missing, "nothing is lost or fetched twice")
        #expect(left.max()! - left.min()! < Self.mebibyte, "\(left.sorted())")
        // The new ranges do not overlap each other or what the two keep.
        let ranges = more.values.sorted { $0.lowerBound < $1.lowerBound }
        #expect(zip(ranges, ranges.dropFirst()).allSatisfy { $0.upperBound <= $1.lowerBound })
    }
}
