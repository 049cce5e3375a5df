import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Adversarial tests of the multi-connection schedule: a seeded simulation drives ``SegmentSchedule`` the way the
/// engine does (a placement taken under the lock, the write outside it, any other event in between), and checks
/// after every step that no byte is claimed twice, that present bytes were really written, and that a phase whose
/// connections keep delivering ends complete.
@Suite("Segment schedule under attack")
struct SegmentAttackTests {
    // MARK: - A deterministic generator

    struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    // MARK: - The schedule's private connections, read through reflection

    struct Claim: CustomStringConvertible {
        var id: Int
        var next: Int64
        var end: Int64
        var stopped: Bool
        var description: String { "#\(id)[\(next),\(end))\(stopped ? " stopped" : "")" }
    }

    static func claims(_ schedule: SegmentSchedule) -> [Claim]? {
        guard let dictionary = Mirror(reflecting: schedule).descendant("connections") else { return nil }
        var claims: [Claim] = []
        for child in Mirror(reflecting: dictionary).children {
            let pair = Mirror(reflecting: child.value).children.map(\.value)
            guard pair.count == 2, let id = pair[0] as? Int else { return nil }
            let connection = Mirror(reflecting: pair[1])
            guard let next = connection.descendant("next") as? Int64, let end = connection.descendant("end") as? Int64,
                let stopped = connection.descendant("stopped") as? Bool
            else { return nil }
            claims.append(Claim(id: id, next: next, end: end, stopped: stopped))
        }
        return claims.sorted { $0.id < $1.id }
    }

    // MARK: - The simulation

    struct Options {
        var total: Int64
        var minimum: Int64
        var connections: DownloadTask.Connections
        var present: ByteRangeSet = ByteRangeSet()
        /// Probability (per mille) that a new connection gets stuck somewhere in its range.
        var stuckPerMille = 0
        /// Probability (per mille) of a transient failure per body piece.
        var failurePerMille = 0
        /// Probability (per mille) that a head is a 503.
        var overloadPerMille = 0
        /// Probability (per mille) that a 206 ends early (a short answer).
        var shortPerMille = 0
        var stall: Duration = .milliseconds(60)
        var idle: Duration = .milliseconds(400)
        var rampWindow: Duration = .milliseconds(30)
    }

    struct SimConnection {
        var requested: Range<Int64>
        /// Where the server's answer ends (a short 206 ends early).
        var serverEnd: Int64
        /// The next byte the server sends.
        var sent: Int64
        var headDone: Bool
        /// A placement taken under the lock, written and reported later.
        var inflight: (position: Int64, count: Int, piece: Int)?
        var cancelled = false
        /// The transfer returned with this error; `ended` not reported yet.
        var done: ResumableError??
        /// The server sends nothing from this byte on.
        var stuckAt: Int64?
        var lastByte: ContinuousClock.Instant
    }

    struct Outcome {
        var end: ResumeStateMachine.SegmentsEnd?
        var steps: Int
        var elapsed: Duration
        var stallStops: Int
        var idleTimeouts: Int
        /// Idle timeouts of a stuck connection while another one received bytes within the stall timeout.
        var idleWhileOthersProgressed = 0
        /// Writes whose count was cut because the connection's end moved between its placement and its write.
        var clampedWrites = 0
        var problems: [String]
    }

    static let stopped = ResumableError(.cancelled, "stopped")

    /// Runs one phase to its end (or `maximumSteps`), checking the invariants after every event.
    static func simulate(seed: UInt64, _ options: Options, maximumSteps: Int = 200_000) -> Outcome {
        var random = SplitMix(state: seed)
        let start = ContinuousClock.now
        var now = start
        let total = options.total
        let probe = options.present.prefixLength..<total
        let settings = SegmentSchedule.Settings(
            connections: options.connections, minimumSegmentLength: options.minimum, stallTimeout: options.stall,
            rampWindow: options.rampWindow)
        var schedule = SegmentSchedule(
            basis: .init(present: options.present, probe: probe, total: total), settings: settings,
            probeConnection: 0, now: now)
        var written = options.present  // bytes really in the file
        var problems: [String] = []
        var connections: [Int: SimConnection] = [
            0: SimConnection(
                requested: probe, serverEnd: probe.upperBound, sent: probe.lowerBound, headDone: true, lastByte: now)
        ]
        var stallStops = 0
        var idleTimeouts = 0
        var idleWhileOthersProgressed = 0
        var clampedWrites = 0
        var stalledIDs: Set<Int> = []

        func newConnection(_ range: Range<Int64>) -> SimConnection {
            var connection = SimConnection(
                requested: range, serverEnd: range.upperBound, sent: range.lowerBound, headDone: false, lastByte: now)
            if Int.random(in: 0..<1000, using: &random) < options.stuckPerMille {
                connection.stuckAt = Int64.random(in: range, using: &random)
            }
            if Int.random(in: 0..<1000, using: &random) < options.shortPerMille, range.count > 1 {
                connection.serverEnd = Int64.random(in: (range.lowerBound + 1)..<range.upperBound, using: &random)
            }
            return connection
        }

        func check(_ context: @autoclosure () -> String) {
            guard problems.count < 5 else { return }
            guard let claims = claims(schedule) else {
                problems.append("cannot read the schedule's connections")
                return
            }
            // Present bytes are bytes in the file.
            for range in schedule.present.ranges where !written.contains(range) {
                problems.append("\(context()): present \(range) holds bytes never written; written \(written.ranges)")
            }
            // No byte is claimed twice, nor claimed while present.
            var seen = schedule.present
            for claim in claims where claim.next < claim.end {
                let range = claim.next..<claim.end
                if seen.gaps(in: range) != [range] {
                    problems.append(
                        "\(context()): \(claim) overlaps present \(schedule.present.ranges) or another: \(claims)")
                }
                seen.insert(range)
            }
        }

        func perform(_ step: SegmentSchedule.Step, _ context: String) -> Bool {
            for action in step.actions {
                switch action {
                case .request(let id, let range):
                    if range.isEmpty || range.lowerBound < 0 || range.upperBound > total {
                        problems.append("\(context): request \(id) for a bad range \(range)")
                    }
                    if schedule.present.gaps(in: range) != [range] {
                        problems.append(
                            "\(context): request \(id) \(range) asks again for present \(schedule.present.ranges)")
                    }
                    if connections[id] != nil { problems.append("\(context): identifier \(id) reused") }
                    connections[id] = newConnection(range)
                case .stop(let id):
                    connections[id]?.cancelled = true
                }
            }
            check(context)
            return step.end != nil
        }

        if perform(schedule.start(now: now), "start") {
            return Outcome(
                end: .complete, steps: 0, elapsed: .zero, stallStops: 0, idleTimeouts: 0,
                problems: problems + ["the phase ended at its start"])
        }
        var steps = 0
        while steps < maximumSteps && problems.isEmpty {
            steps += 1
            // The events possible now, one picked at random: each connection's next event, or a tick.
            var events: [(Int, Int)] = []  // (connection, kind) with kind 0: ended, 1: head, 2: placement, 3: write
            for (id, connection) in connections {
                if connection.done != nil {
                    events.append((id, 0))
                } else if let _ = connection.inflight {
                    events.append((id, 3))
                } else if connection.cancelled {
                    events.append((id, 0))
                } else if !connection.headDone {
                    if connection.stuckAt != connection.requested.lowerBound { events.append((id, 1)) }
                } else if connection.sent < connection.serverEnd, connection.stuckAt != connection.sent {
                    events.append((id, 2))
                } else if connection.sent >= connection.serverEnd {
                    events.append((id, 0))
                }
            }
            events.sort { $0 < $1 }
            let tickWeight = max(1, events.count / 3)
            let pick = Int.random(in: 0..<(events.count + tickWeight), using: &random)
            if pick >= events.count {
                now += .milliseconds(Int.random(in: 0...25, using: &random))
                // The transport's idle timeout: a connection with nothing for that long fails.
                for (id, connection) in connections
                where connection.done == nil && connection.inflight == nil && !connection.cancelled
                    && now - connection.lastByte >= options.idle
                {
                    connections[id]?.done = .some(ResumableError(.timedOut, "idle timeout"))
                    idleTimeouts += 1
                    if connections.values.contains(where: { $0.done == nil && now - $0.lastByte < options.stall }) {
                        idleWhileOthersProgressed += 1
                    }
                }
                let step = schedule.tick(now: now)
                for case .stop(let id) in step.actions where connections[id]?.cancelled == false {
                    if now - (connections[id]?.lastByte ?? now) >= options.stall { stalledIDs.insert(id) }
                }
                stallStops += step.actions.filter { if case .stop = $0 { true } else { false } }.count
                if perform(step, "tick at \(now - start)") {
                    problems.append("a tick ended the phase")
                }
                continue
            }
            let (id, kind) = events[pick]
            guard var connection = connections[id] else { continue }
            now += .microseconds(Int.random(in: 0...500, using: &random))
            switch kind {
            case 0:
                let error = connection.done ?? (connection.cancelled ? stopped : nil)
                connections[id] = nil
                let step = schedule.ended(connection: id, error: error, now: now)
                if perform(step, "ended \(id)"), let end = step.end {
                    if case .complete = end {
                        if !schedule.present.contains(0..<total) {
                            problems.append("complete with present \(schedule.present.ranges)")
                        }
                        if !written.contains(0..<total) { problems.append("complete with written \(written.ranges)") }
                    }
                    return Outcome(
                        end: end, steps: steps, elapsed: now - start, stallStops: stallStops,
                        idleTimeouts: idleTimeouts, idleWhileOthersProgressed: idleWhileOthersProgressed,
                        clampedWrites: clampedWrites, problems: problems)
                }
            case 1:
                connection.headDone = true
                connection.lastByte = now
                let verdict: ResumeStateMachine.SegmentVerdict
                if Int.random(in: 0..<1000, using: &random) < options.overloadPerMille {
                    verdict = .overloaded(ResumableError(.httpStatus, "503", httpStatus: 503))
                } else {
                    verdict = .join(end: connection.serverEnd)
                }
                if !schedule.head(connection: id, verdict: verdict, now: now) {
                    connection.done = .some(nil)
                }
                connections[id] = connection
                check("head \(id)")
            case 2:
                if Int.random(in: 0..<1000, using: &random) < options.failurePerMille {
                    connection.done = .some(ResumableError(.network, "reset"))
                    connections[id] = connection
                    continue
                }
                var limit = connection.serverEnd - connection.sent
                if let stuck = connection.stuckAt, stuck > connection.sent {
                    limit = min(limit, stuck - connection.sent)
                }
                let piece = Int(Int64.random(in: 1...max(1, min(limit, 3 * options.minimum)), using: &random))
                if let placement = schedule.placement(connection: id, count: piece) {
                    // The 206 goes where its bytes belong: the server's next byte.
                    if placement.position != connection.sent {
                        problems.append(
                            "placement of \(id) at \(placement.position), but its answer is at \(connection.sent)")
                    }
                    if placement.count < 1 || placement.count > piece {
                        problems.append("placement of \(id) counts \(placement.count) of \(piece)")
                    }
                    connection.inflight = (placement.position, placement.count, piece)
                } else {
                    connection.done = .some(segmentComplete)
                }
                connections[id] = connection
            default:
                guard let (position, count, piece) = connection.inflight else { continue }
                // The bytes are written (outside the lock), then reported.
                written.insert(position..<(position + Int64(count)))
                let (presentBefore, writtenBefore) = (schedule.present.count, schedule.bytesWritten)
                let complete = schedule.wrote(connection: id, count: count, now: now)
                let (presentAfter, writtenAfter) = (schedule.present.count, schedule.bytesWritten)
                if writtenAfter - writtenBefore < Int64(count) { clampedWrites += 1 }
                if presentAfter - presentBefore != writtenAfter - writtenBefore {
                    problems.append(
                        "wrote \(id): \(writtenAfter - writtenBefore) bytes counted, present grew by \(presentAfter - presentBefore)"
                    )
                }
                connection.inflight = nil
                connection.sent += Int64(piece)
                connection.lastByte = now
                if complete || count < piece { connection.done = .some(segmentComplete) }
                connections[id] = connection
                check("wrote \(id)")
            }
        }
        if problems.isEmpty {
            problems.append(
                "no end after \(steps) steps (\(now - start) simulated): present \(schedule.present.ranges), "
                    + "claims \(claims(schedule).map(\.description) ?? "?"), sim \(connections.mapValues { ($0.sent, $0.stuckAt, $0.cancelled, $0.headDone) })"
            )
        }
        return Outcome(
            end: nil, steps: steps, elapsed: now - start, stallStops: stallStops, idleTimeouts: idleTimeouts,
            idleWhileOthersProgressed: idleWhileOthersProgressed, clampedWrites: clampedWrites, problems: problems)
    }

    static let segmentComplete = ResumableError(.cancelled, "the segment is complete")

    static func randomOptions(seed: UInt64, hostile: Bool) -> Options {
        var random = SplitMix(state: seed ^ 0xABCD_EF01)
        let minimum = Int64.random(in: 1...64, using: &random)
        let total = Int64.random(in: (2 * minimum)...(80 * minimum), using: &random)
        let connections: DownloadTask.Connections =
            Bool.random(using: &random) ? .automatic : .fixed(Int.random(in: 2...16, using: &random))
        var present = ByteRangeSet()
        if Bool.random(using: &random) {
            // A version 2 token: a prefix, then completed ranges with gaps between them.
            let pieces = Int.random(in: 0...6, using: &random)
            for _ in 0..<pieces {
                let lower = Int64.random(in: 0..<total, using: &random)
                let upper = min(total, lower + Int64.random(in: 1...(4 * minimum), using: &random))
                present.insert(lower..<upper)
            }
            if present.contains(0..<total) { present = ByteRangeSet([0..<(total / 2)]) }
        }
        var options = Options(total: total, minimum: minimum, connections: connections, present: present)
        if hostile {
            options.stuckPerMille = Int.random(in: 0...300, using: &random)
            options.failurePerMille = Int.random(in: 0...20, using: &random)
            options.overloadPerMille = Int.random(in: 0...150, using: &random)
            options.shortPerMille = Int.random(in: 0...200, using: &random)
        } else {
            // Every connection delivers; the simulated clock only moves at ticks, so a slow turn is not a stall.
            options.shortPerMille = Int.random(in: 0...200, using: &random)
            options.stall = .seconds(3600)
            options.idle = .seconds(7200)
        }
        return options
    }

    // MARK: - Randomized invariants

    @Test("Connections that keep delivering (short answers included): every phase ends complete, nothing claimed twice")
    func randomizedCooperative() {
        var failures: [String] = []
        var clamped = 0
        for seed in UInt64(1)...120 {
            let options = Self.randomOptions(seed: seed, hostile: false)
            let outcome = Self.simulate(seed: seed, options)
            clamped += outcome.clampedWrites
            var problems = outcome.problems
            if problems.isEmpty, outcome.end.map({ if case .complete = $0 { false } else { true } }) ?? true {
                problems.append("ended \(String(describing: outcome.end)) although every connection delivered")
            }
            if !problems.isEmpty {
                failures.append(
                    "seed \(seed) \(options.connections) total \(options.total) min \(options.minimum) "
                        + "present \(options.present.ranges): \(problems)")
            }
        }
        #expect(failures.isEmpty, "\(failures.count) failing seeds; first: \(failures.prefix(3))")
        // The simulation does reach the race it exists for: an end moved between a placement and its write.
        #expect(clamped > 0)
    }

    @Test("Stuck connections, failures, 503s and short answers: a phase always ends, never claims a byte twice")
    func randomizedHostile() {
        var failures: [String] = []
        for seed in UInt64(1)...120 {
            let options = Self.randomOptions(seed: seed, hostile: true)
            let outcome = Self.simulate(seed: seed, options)
            if !outcome.problems.isEmpty {
                failures.append(
                    "seed \(seed) \(options.connections) total \(options.total) min \(options.minimum) "
                        + "present \(options.present.ranges): \(outcome.problems)")
            }
        }
        #expect(failures.isEmpty, "\(failures.count) failing seeds; first: \(failures.prefix(3))")
    }

    // MARK: - The stall rule

    @Test(
        "A segment stuck from its start beside one that delivers steadily but slowly is stopped after twice the stall timeout, and its idle timeout does not lower the count"
    )
    func stuckSegmentBesideASlowOne() {
        // fixed(2), 8 MiB, a minimum segment of 1 MiB, a stall timeout of 1 s. Connection 0 (the first answer) is
        // stuck from the start; connection 1 delivers 64 KiB every 500 ms (128 KiB/s) the whole time: it never
        // writes a minimum segment within a few seconds, so only the silence of twice the stall timeout finds the stall.
        let start = ContinuousClock.now
        let mebibyte: Int64 = 1 << 20
        let settings = SegmentSchedule.Settings(
            connections: .fixed(2), minimumSegmentLength: mebibyte, stallTimeout: .seconds(1))
        var schedule = SegmentSchedule(
            basis: .init(present: ByteRangeSet(), probe: 0..<(8 * mebibyte), total: 8 * mebibyte), settings: settings,
            probeConnection: 0, now: start)
        let started = schedule.start(now: start)
        #expect(started.actions == [.request(connection: 1, range: (4 * mebibyte)..<(8 * mebibyte))])
        _ = schedule.head(connection: 1, verdict: .join(end: 8 * mebibyte), now: start)
        var stoppedAt: Duration?
        var elapsed: Duration = .zero
        while elapsed < .seconds(5), stoppedAt == nil {
            elapsed += .milliseconds(500)
            _ = schedule.wrote(connection: 1, count: 64 << 10, now: start + elapsed)
            if schedule.tick(now: start + elapsed).actions.contains(.stop(connection: 0)) { stoppedAt = elapsed }
        }
        #expect(stoppedAt == .seconds(2), "stuck beside a connection receiving all along")
        // Its end is a stall: asked again on a fresh connection, the count stays.
        let ended = schedule.ended(connection: 0, error: nil, now: start + elapsed)
        #expect(ended.end == nil)
        #expect(ended.failure?.remaining == 0..<(4 * mebibyte))
        #expect(ended.actions.count == 1)
        #expect(schedule.target == 2)
    }

    @Test("An idle timeout after an accepted 206 is a stall the transport found, not a refused connection")
    func idleTimeoutAfterAcceptedHead() {
        let start = ContinuousClock.now
        let mebibyte: Int64 = 1 << 20
        let settings = SegmentSchedule.Settings(
            connections: .fixed(3), minimumSegmentLength: mebibyte, stallTimeout: .seconds(600))
        var schedule = SegmentSchedule(
            basis: .init(present: ByteRangeSet(), probe: 0..<(9 * mebibyte), total: 9 * mebibyte), settings: settings,
            probeConnection: 0, now: start)
        let requests = schedule.start(now: start).actions
        #expect(requests.count == 2)
        guard case .request(let accepted, let acceptedRange) = requests.first,
            case .request(let refused, _) = requests.last
        else { return #expect(Bool(false), "\(requests)") }
        _ = schedule.head(connection: accepted, verdict: .join(end: acceptedRange.upperBound), now: start)
        let timedOut = schedule.ended(
            connection: accepted, error: ResumableError(.timedOut, "idle timeout"), now: start + .seconds(60))
        #expect(timedOut.end == nil)
        #expect(schedule.target == 3, "an accepted connection that went silent says nothing about a connection limit")
        // One that never got an answer is likely beyond a limit: the count goes down to those still working.
        let refusedEnd = schedule.ended(
            connection: refused, error: ResumableError(.network, "connection refused"), now: start + .seconds(61))
        #expect(refusedEnd.end == nil)
        #expect(schedule.target < 3)
    }

    // MARK: - End to end

    @Test(
        "Paused during the first split, resumed with fixed(16) and paused again, resumed with automatic: each token is exactly the bytes in the file"
    )
    func pauseResumeChain() async throws {
        let fixture = try DownloadFixture()
        let seed: UInt64 = 171
        let total = Segmented.total
        let path = Segmented.path
        let quarters = (0..<4).map { Segmented.start($0, of: 4) }
        // 1. fixed(4): each of the four responses held after a few bytes, then paused.
        fixture.serve(.generated(length: total, seed: seed))
        let sent: [Int64] = [100_000, 10_000, 20_000, 30_000]
        let gates = sent.map { BodyGate(holdingAfter: $0) }
        defer { for gate in gates { gate.open() } }
        fixture.server.enqueue(behavior: Behavior(gate: gates[0]), for: path)
        for (start, gate) in zip(quarters, gates).dropFirst() {
            fixture.server.enqueue(behavior: Behavior(gate: gate), for: path, whenRangeStartsAt: start)
        }
        let first = try fixture.download(configuration: Segmented.configuration(.fixed(4)))
        for gate in gates { try #require(await gate.waitUntilHeld(timeout: Waiting.deadline), "\(gate)") }
        let written = zip(quarters, sent).map { $0..<($0 + $1) }
        try await fixture.waitUntilTemporaryFileHolds(written, seed: seed)
        let token1 = try #require(await first.cancelProducingResumeData())
        #expect(ByteRangeSet(token1.presentRanges) == ByteRangeSet(written))

        // 2. fixed(16) from that token: sixteen connections at once (the first answer cut to an even share, the
        // gaps shared), every response held after 5000 bytes, then paused again.
        let held: Int64 = 5_000
        let gate = BodyGate(holdingAfter: held)
        defer { gate.open() }
        fixture.serve(.generated(length: total, seed: seed, behavior: Behavior(gate: gate)))
        fixture.server.clearRequests()
        let second = try fixture.resumeThroughDisk(token1, configuration: Segmented.configuration(.fixed(16)))
        try #require(await gate.waitUntilHeld(count: 16, timeout: Waiting.deadline), "\(gate) \(fixture.ranges())")
        var asked: [Range<Int64>] = []
        for request in fixture.server.requests(for: path) {
            let range = try #require(askedRange(request, total: total))
            #expect(ByteRangeSet(token1.presentRanges).gaps(in: range) == [range], "\(range) asks for bytes it had")
            asked.append(range)
        }
        #expect(asked.count == 16, "\(fixture.ranges())")
        let heads = asked.map { $0.lowerBound..<min($0.upperBound, $0.lowerBound + held) }
        try await fixture.waitUntilTemporaryFileHolds(heads, seed: seed)
        let token2 = try #require(await second.cancelProducingResumeData())
        // Nothing written is forgotten, nothing unwritten is claimed.
        #expect(ByteRangeSet(token2.presentRanges) == ByteRangeSet(token1.presentRanges + heads))
        for range in token2.presentRanges {
            try expectSameBytes(
                readBytes(of: token2.tempPath, in: range), serverBytes(seed: seed, in: range), "\(range)")
        }

        // 3. automatic from the second token, nothing held: the file is the server's, and no byte is asked again.
        gate.open()
        fixture.serve(.generated(length: total, seed: seed))
        fixture.server.clearRequests()
        let result = try await fixture.resumeThroughDisk(token2, configuration: Segmented.configuration(.automatic))
            .value
        #expect(try fixture.file(result.fileURL, holds: total, seed: seed))
        #expect(!result.restarted)
        let present = ByteRangeSet(token2.presentRanges)
        for request in fixture.server.requests(for: path) {
            let range = try #require(askedRange(request, total: total))
            #expect(present.gaps(in: range) == [range], "\(range) asks again for bytes the token had")
        }
        #expect(fixture.temporaryFiles().isEmpty)
    }
}
