import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// How a soak run is set up, from the environment.
///
/// - `RESUMABLE_SOAK_SEED`: the seed (decimal or `0x` hex); a fresh random one by default.
/// - `RESUMABLE_SOAK_COUNT`: how many downloads, 200 by default.
/// - `RESUMABLE_SOAK_CONCURRENCY`: how many run at a time, 8 by default.
/// - `RESUMABLE_SOAK_ONLY`: comma-separated download indices to run alone (to replay one failure).
struct SoakSettings: Sendable {
    var seed: UInt64
    var count: Int
    var concurrency: Int
    var only: [Int]?

    static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> SoakSettings {
        let seed = environment["RESUMABLE_SOAK_SEED"].flatMap(parseSeed) ?? UInt64.random(in: 0...UInt64.max)
        let count = environment["RESUMABLE_SOAK_COUNT"].flatMap { Int($0) }.map { max(1, $0) } ?? 200
        let concurrency = environment["RESUMABLE_SOAK_CONCURRENCY"].flatMap { Int($0) }.map { max(1, $0) } ?? 8
        let only = environment["RESUMABLE_SOAK_ONLY"].map { list in
            list.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        }
        return SoakSettings(seed: seed, count: count, concurrency: concurrency, only: only)
    }

    static func parseSeed(_ text: String) -> UInt64? {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        if trimmed.hasPrefix("0x") { return UInt64(trimmed.dropFirst(2), radix: 16) }
        return UInt64(trimmed)
    }

    /// The indices of the downloads to run.
    var indices: [Int] {
        only ?? Array(0..<count)
    }

    /// The command that replays this run (or, given indices, only those downloads).
    func reproduction(only indices: [Int]? = nil) -> String {
        var command = "RESUMABLE_SOAK_SEED=\(seed)"
        if count != 200 { command += " RESUMABLE_SOAK_COUNT=\(count)" }
        if let indices { command += " RESUMABLE_SOAK_ONLY=\(indices.map(String.init).joined(separator: ","))" }
        return command + " swift test --filter FaultSoakTests"
    }
}

@Suite("Fault-injection soak")
struct FaultSoakTests {
    @Test(
        "Hundreds of downloads under random faults, pauses and content changes end in the right bytes or a clear error"
    )
    func soak() async throws {
        let settings = SoakSettings.fromEnvironment()
        print("FaultSoak seed: \(settings.seed) (0x\(String(settings.seed, radix: 16)))")
        print("FaultSoak reproduce: \(settings.reproduction())")
        let server = try LoopbackServer()
        let root = try TemporaryDirectory()
        let tokens = root.url.appendingPathComponent("tokens", isDirectory: true)
        try FileManager.default.createDirectory(at: tokens, withIntermediateDirectories: true)

        let clock = ContinuousClock()
        let start = clock.now
        let reports = await withTaskGroup(of: SoakReport.self) { group in
            var pending = settings.indices[...]
            func startNext() {
                guard let index = pending.popFirst() else { return }
                group.addTask {
                    var download = SoakDownload(
                        plan: SoakPlan(seed: settings.seed, index: index),
                        server: server,
                        directory: root.url.appendingPathComponent("download-\(index)", isDirectory: true),
                        tokenDirectory: tokens
                    )
                    return await download.run()
                }
            }
            for _ in 0..<settings.concurrency { startNext() }
            var reports: [SoakReport] = []
            for await report in group {
                reports.append(report)
                startNext()
            }
            return reports.sorted { $0.plan.index < $1.plan.index }
        }
        let elapsed = clock.now - start

        var tally = SoakTally()
        for report in reports { tally.add(report) }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        print(
            "FaultSoak count: \(tally.downloads) downloads, \(settings.concurrency) at a time, "
                + String(format: "%.1f s", seconds))
        print("FaultSoak faults (served/planned): \(tally.faultLine)")
        print("FaultSoak outcomes: \(tally.outcomeLine)")
        print("FaultSoak hand-offs: \(tally.handOffLine)")
        print("FaultSoak validators and transports: \(tally.variantLine)")

        #expect(tally.downloads == settings.indices.count)
        var failing: [Int] = []
        for report in reports where !report.outcome.isAcceptable || !report.issues.isEmpty {
            failing.append(report.plan.index)
            guard failing.count <= 10 else { continue }
            var message = "\(report.outcome.label): \(report.detail)"
            if !report.issues.isEmpty {
                message += "\nbroken invariants:\n- " + report.issues.joined(separator: "\n- ")
            }
            message += "\nplan: \(report.plan.summary)"
            message += "\nwhat happened: \(report.journal.joined(separator: " → "))"
            message += "\nreplay: \(settings.reproduction(only: [report.plan.index]))"
            Issue.record(Comment(rawValue: message))
        }
        if !failing.isEmpty {
            print("FaultSoak failing downloads: \(failing.map(String.init).joined(separator: ", "))")
            let summary =
                "\(failing.count) of \(reports.count) downloads broke the contract "
                + "(WRONG \(tally.outcomes["WRONG"] ?? 0)); replay with \(settings.reproduction())"
            Issue.record(Comment(rawValue: summary))
        }
    }
}
