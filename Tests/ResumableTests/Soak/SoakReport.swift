import Foundation

@testable import Resumable

/// How one download of the soak ended.
enum SoakOutcome: Sendable {
    /// The download succeeded and the file holds exactly the content registered last.
    case finishedCorrect
    /// The download failed with a sensible error (after the resumes its budget allowed).
    case clearError(String)
    /// The download claimed success, but the file's bytes are not the content registered last.
    case wrong(String)
    /// The download failed with an error no fault of the soak can explain.
    case unexpectedError(String)
    /// The download did not end within the deadline.
    case hung

    /// The key the outcome is tallied under.
    var label: String {
        switch self {
        case .finishedCorrect: return "finished-correct"
        case .clearError(let code): return "clear-error \(code)"
        case .wrong: return "WRONG"
        case .unexpectedError(let code): return "unexpected-error \(code)"
        case .hung: return "hung"
        }
    }

    /// Whether the outcome is one the reliability issue allows.
    var isAcceptable: Bool {
        switch self {
        case .finishedCorrect, .clearError: return true
        case .wrong, .unexpectedError, .hung: return false
        }
    }
}

/// What one download did: its plan, how it ended, and everything the oracle noticed on the way.
struct SoakReport: Sendable {
    let plan: SoakPlan
    var outcome = SoakOutcome.hung
    /// The failure message for an outcome that is not acceptable.
    var detail = ""
    /// How many of the queued steps the server served (the rest were never asked for).
    var servedSteps = 0
    var requests = 0
    var pausesWithToken = 0
    var pausesWithoutToken = 0
    var pausesTooLate = 0
    var contentChanges = 0
    var failureResumes = 0
    var freshStarts = 0
    /// Hand-offs where the temporary file was truncated, extended or deleted first.
    var tampers = 0
    /// Broken invariants other than the outcome: leaked files, tokens that do not describe the bytes on disk.
    var issues: [String] = []
    /// What happened, in order, for failure messages.
    var journal: [String] = []

    /// The faults whose first step the server served.
    var servedFaults: [SoakFault] {
        plan.steps.prefix(servedSteps).compactMap { $0.startsFault ? $0.fault : nil }
    }
}

/// Counts over a whole soak run.
struct SoakTally {
    var downloads = 0
    var planned: [SoakFault: Int] = [:]
    var served: [SoakFault: Int] = [:]
    var styles: [SoakValidatorStyle: Int] = [:]
    var transports: [String: Int] = [:]
    var outcomes: [String: Int] = [:]
    var requests = 0
    var pausesWithToken = 0
    var pausesWithoutToken = 0
    var pausesTooLate = 0
    var contentChanges = 0
    var failureResumes = 0
    var freshStarts = 0
    var tampers = 0
    var issues = 0

    mutating func add(_ report: SoakReport) {
        downloads += 1
        for fault in report.plan.faults { planned[fault, default: 0] += 1 }
        for fault in report.servedFaults { served[fault, default: 0] += 1 }
        styles[report.plan.style, default: 0] += 1
        transports["\(report.plan.transport)", default: 0] += 1
        outcomes[report.outcome.label, default: 0] += 1
        requests += report.requests
        pausesWithToken += report.pausesWithToken
        pausesWithoutToken += report.pausesWithoutToken
        pausesTooLate += report.pausesTooLate
        contentChanges += report.contentChanges
        failureResumes += report.failureResumes
        freshStarts += report.freshStarts
        tampers += report.tampers
        issues += report.issues.count
    }

    /// `connection-drop 120/131, …`: served of planned, per fault kind.
    var faultLine: String {
        SoakFault.allCases.map { "\($0.rawValue) \(served[$0, default: 0])/\(planned[$0, default: 0])" }
            .joined(separator: ", ")
    }

    /// `finished-correct 190, clear-error network 4, …, WRONG 0`.
    var outcomeLine: String {
        var labels = outcomes.keys.sorted { lhs, rhs in
            (lhs == "finished-correct" ? 0 : 1, lhs) < (rhs == "finished-correct" ? 0 : 1, rhs)
        }
        if outcomes["WRONG"] == nil { labels.append("WRONG") }
        return labels.map { "\($0) \(outcomes[$0, default: 0])" }.joined(separator: ", ")
    }

    var handOffLine: String {
        "pauses with a token \(pausesWithToken), pauses before any byte \(pausesWithoutToken), "
            + "pauses after the finish \(pausesTooLate), content changes while paused \(contentChanges), "
            + "resumes after a failure \(failureResumes) (fresh starts \(freshStarts)), "
            + "temporary files tampered with \(tampers), requests \(requests)"
    }

    var variantLine: String {
        let styleCounts = SoakValidatorStyle.allCases.map { "\($0.rawValue) \(styles[$0, default: 0])" }
        let transportCounts = transports.keys.sorted().map { "\($0) \(transports[$0, default: 0])" }
        return (styleCounts + transportCounts).joined(separator: ", ")
    }
}
