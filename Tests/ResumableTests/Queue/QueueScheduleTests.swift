import Foundation
import Testing

@testable import Resumable

@Suite("QueueSchedule: which downloads run")
struct QueueScheduleTests {
    typealias ID = DownloadQueue.TaskID

    static func ids(_ count: Int) -> [ID] { (0..<count).map { _ in ID() } }

    static func started(_ actions: [QueueSchedule.Action]) -> [ID] {
        actions.compactMap { if case .start(let id) = $0 { return id } else { return nil } }
    }

    @Test("At most the limit run; the next starts when one ends, first in first out")
    func limitAndOrder() {
        var schedule = QueueSchedule(limits: .init(concurrent: 2, perHost: 2))
        let ids = Self.ids(5)
        var started: [ID] = []
        for id in ids { started += Self.started(schedule.add(id, host: "h", priority: 0, paused: false)) }
        #expect(started == Array(ids.prefix(2)))
        #expect(schedule.runningCount == 2)
        #expect(Self.started(schedule.ended(ids[1], paused: false)) == [ids[2]])
        #expect(Self.started(schedule.ended(ids[0], paused: false)) == [ids[3]])
        #expect(schedule.phase(of: ids[0]) == nil)
    }

    @Test("Higher priority first; within a priority, first in first out; moveToFront jumps the line")
    func priorities() {
        var schedule = QueueSchedule(limits: .init(concurrent: 1, perHost: 1))
        let ids = Self.ids(5)
        _ = schedule.add(ids[0], host: "h", priority: 0, paused: false)  // runs
        _ = schedule.add(ids[1], host: "h", priority: 0, paused: false)
        _ = schedule.add(ids[2], host: "h", priority: 5, paused: false)
        _ = schedule.add(ids[3], host: "h", priority: 0, paused: false)
        _ = schedule.add(ids[4], host: "h", priority: 5, paused: false)
        #expect(schedule.order == [ids[2], ids[4], ids[0], ids[1], ids[3]])
        _ = schedule.moveToFront(ids[3])
        #expect(schedule.order == [ids[2], ids[4], ids[3], ids[0], ids[1]])
        #expect(Self.started(schedule.ended(ids[0], paused: false)) == [ids[2]])
        _ = schedule.setPriority(ids[1], 9)
        #expect(Self.started(schedule.ended(ids[2], paused: false)) == [ids[1]])
    }

    @Test("A full host does not hold back downloads from other hosts")
    func perHost() {
        var schedule = QueueSchedule(limits: .init(concurrent: 3, perHost: 1))
        let ids = Self.ids(4)
        var started: [ID] = []
        started += Self.started(schedule.add(ids[0], host: "a", priority: 0, paused: false))
        started += Self.started(schedule.add(ids[1], host: "a", priority: 0, paused: false))
        started += Self.started(schedule.add(ids[2], host: "b", priority: 0, paused: false))
        started += Self.started(schedule.add(ids[3], host: "b", priority: 0, paused: false))
        #expect(started == [ids[0], ids[2]])
        #expect(Self.started(schedule.ended(ids[0], paused: false)) == [ids[1]])
    }

    @Test("Pause: a waiting one keeps its place without starting, a running one is paused; resume and cancel")
    func pauseResumeCancel() {
        var schedule = QueueSchedule(limits: .init(concurrent: 1, perHost: 1))
        let ids = Self.ids(3)
        for id in ids { _ = schedule.add(id, host: "h", priority: 0, paused: false) }
        #expect(schedule.pause(ids[1]).isEmpty)
        #expect(schedule.phase(of: ids[1]) == .paused)
        #expect(schedule.pause(ids[0]) == [.pause(ids[0])])
        #expect(schedule.phase(of: ids[0]) == .pausing)
        // The paused download is skipped: the one behind it starts.
        #expect(Self.started(schedule.ended(ids[0], paused: true)) == [ids[2]])
        #expect(schedule.phase(of: ids[0]) == .paused)
        #expect(schedule.resume(ids[1]).isEmpty, "the slot is taken")
        #expect(schedule.cancel(ids[2]) == [.cancel(ids[2]), .start(ids[1])])
        #expect(schedule.cancel(ids[0]).isEmpty, "a paused one has nothing to stop")
        #expect(schedule.order == [ids[1]])
    }

    @Test("Added paused, a download never starts until resumed; limits can change while running")
    func addedPausedAndLimits() {
        var schedule = QueueSchedule(limits: .init(concurrent: 1, perHost: 5))
        let ids = Self.ids(4)
        #expect(schedule.add(ids[0], host: "h", priority: 0, paused: true).isEmpty)
        for id in ids.dropFirst() { _ = schedule.add(id, host: "h", priority: 0, paused: false) }
        #expect(Self.started(schedule.setLimits(.init(concurrent: 3, perHost: 5))) == [ids[2], ids[3]])
        #expect(schedule.setLimits(.init(concurrent: 0, perHost: 0)).isEmpty, "limits below 1 mean 1")
        #expect(schedule.limits == .init(concurrent: 1, perHost: 1))
        #expect(Self.started(schedule.ended(ids[1], paused: false)).isEmpty, "still two running above the limit")
        #expect(Self.started(schedule.resume(ids[0])).isEmpty)
    }

    @Test("Suspended, the running ones pause, the waiting ones keep their phase and nothing starts until unsuspended")
    func suspension() {
        var schedule = QueueSchedule(limits: .init(concurrent: 2, perHost: 2))
        let ids = Self.ids(4)
        for id in ids { _ = schedule.add(id, host: "h", priority: 0, paused: false) }
        #expect(Set(schedule.suspend()) == [.pause(ids[0]), .pause(ids[1])])
        #expect(Self.started(schedule.ended(ids[0], paused: true)).isEmpty)
        #expect(Self.started(schedule.ended(ids[1], paused: true)).isEmpty)
        #expect(schedule.runningCount == 0)
        #expect(schedule.phase(of: ids[2]) == .waiting)
        #expect(Self.started(schedule.add(QueueScheduleTests.ID(), host: "h", priority: 9, paused: false)).isEmpty)
        #expect(Self.started(schedule.unsuspend()).count == 2)
    }

    @Test("Random operations never break the limits or the order, and never start a paused download")
    func randomized() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let concurrent = Int.random(in: 1...4, using: &generator)
            let perHost = Int.random(in: 1...3, using: &generator)
            var schedule = QueueSchedule(limits: .init(concurrent: concurrent, perHost: perHost))
            var hosts: [ID: String] = [:]
            var priorities: [ID: Int] = [:]
            var running: Set<ID> = []
            for _ in 0..<300 {
                var actions: [QueueSchedule.Action] = []
                let known = Array(hosts.keys)
                switch Int.random(in: 0..<8, using: &generator) {
                case 0, 1:
                    let id = ID()
                    hosts[id] = ["a", "b", "c"].randomElement(using: &generator)!
                    priorities[id] = Int.random(in: 0...2, using: &generator)
                    actions = schedule.add(
                        id, host: hosts[id]!, priority: priorities[id]!, paused: Bool.random(using: &generator))
                case 2:
                    if let id = running.randomElement(using: &generator) {
                        running.remove(id)
                        let paused = Bool.random(using: &generator)
                        actions = schedule.ended(id, paused: paused)
                        if !paused {
                            hosts[id] = nil
                            priorities[id] = nil
                        }
                    }
                case 3: if let id = known.randomElement(using: &generator) { actions = schedule.pause(id) }
                case 4: if let id = known.randomElement(using: &generator) { actions = schedule.resume(id) }
                case 5:
                    if let id = known.randomElement(using: &generator) {
                        actions = schedule.cancel(id)
                        running.remove(id)
                        hosts[id] = nil
                        priorities[id] = nil
                    }
                case 6:
                    if let id = known.randomElement(using: &generator) {
                        priorities[id] = Int.random(in: 0...2, using: &generator)
                        actions = schedule.setPriority(id, priorities[id]!)
                    }
                default:
                    if let id = known.randomElement(using: &generator) { actions = schedule.moveToFront(id) }
                }
                for case .start(let id) in actions {
                    #expect(!running.contains(id), "started twice")
                    running.insert(id)
                }
                let active = hosts.keys.filter {
                    schedule.phase(of: $0) == .running || schedule.phase(of: $0) == .pausing
                }
                #expect(active.count <= concurrent)
                for host in ["a", "b", "c"] {
                    #expect(active.filter { hosts[$0] == host }.count <= perHost)
                }
                // Nothing waits that could run: every waiting download's host is full, or all slots are taken.
                if active.count < concurrent {
                    for id in hosts.keys where schedule.phase(of: id) == .waiting {
                        #expect(active.filter { hosts[$0] == hosts[id] }.count >= perHost, "a free slot left unused")
                    }
                }
            }
        }
    }
}
