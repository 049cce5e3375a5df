import Foundation
import Resumable
import Synchronization

/// How a command reports while it runs.
enum OutputMode: Sendable, Equatable {
    /// A progress bar redrawn in place on standard error (at most 10 times a second), plus messages.
    case terminal
    /// A plain progress line on standard error every few seconds, plus messages (standard error is not a TTY).
    case plain
    /// JSON lines on standard error, one per event; the final result is the only thing on standard output.
    case json
    /// Nothing while running (`--quiet`); errors and resume hints are still printed.
    case silent
    /// `--quiet --json`: no event lines; the final result object is still printed on standard output.
    case jsonSilent

    /// The mode for the given flags and the current standard error.
    static func choose(json: Bool, quiet: Bool) -> OutputMode {
        if json { return quiet ? .jsonSilent : .json }
        if quiet { return .silent }
        return Console.stderrIsTerminal ? .terminal : .plain
    }

    /// Whether results are JSON.
    var isJSON: Bool { self == .json || self == .jsonSilent }
}

/// Turns download events into progress output on standard error, in one of the ``OutputMode``s.
///
/// Events arrive from the library's event stream, checkpoints from the library's threads; the renderer is
/// thread-safe and keeps the bar and messages from tearing each other.
final class ProgressRenderer: Sendable {
    private struct State {
        var lastDraw: ContinuousClock.Instant?
        var lastPlainLine: ContinuousClock.Instant
        var barVisible = false
        var latest: DownloadProgress?
    }

    /// The mode this renderer writes in.
    let mode: OutputMode
    private let plainInterval: Duration
    private let state: Mutex<State>
    private static let redrawInterval = Duration.milliseconds(100)

    /// A renderer; in ``OutputMode/plain`` a progress line is written every `plainInterval`.
    init(mode: OutputMode, plainInterval: Duration = .seconds(5)) {
        self.mode = mode
        self.plainInterval = plainInterval
        self.state = Mutex(State(lastPlainLine: .now))
    }

    /// Reports a library event.
    func handle(_ event: DownloadEvent) {
        switch mode {
        case .json:
            Console.err(EventJSON.event(event).serialized)
        case .silent, .jsonSilent:
            return
        case .terminal, .plain:
            if case .progress(let progress) = event {
                show(progress)
            } else if let text = Self.describe(event) {
                note(text)
            }
        }
    }

    /// A message for people (terminal and plain modes only).
    func note(_ text: String) {
        guard mode == .terminal || mode == .plain else { return }
        state.withLock { state in
            if state.barVisible {
                Console.errRaw("\r\u{1B}[K")
                state.barVisible = false
                state.lastDraw = nil
            }
            Console.err(text)
        }
    }

    /// A JSON event line of the tool's own (JSON mode only).
    func emit(_ value: JSONValue) {
        guard mode == .json else { return }
        Console.err(value.serialized)
    }

    /// Removes the progress bar, before the final report.
    func finish() {
        state.withLock { state in
            if state.barVisible { Console.errRaw("\r\u{1B}[K") }
            state.barVisible = false
        }
    }

    private func show(_ progress: DownloadProgress) {
        let now = ContinuousClock.now
        state.withLock { state in
            state.latest = progress
            switch mode {
            case .terminal:
                if let last = state.lastDraw, now - last < Self.redrawInterval { return }
                state.lastDraw = now
                let line = Self.barLine(progress, width: Console.terminalWidth)
                Console.errRaw("\r" + line + "\u{1B}[K")
                state.barVisible = true
            case .plain:
                guard now - state.lastPlainLine >= plainInterval else { return }
                state.lastPlainLine = now
                Console.err(Self.plainLine(progress))
            default:
                return
            }
        }
    }

    /// `  37% [=======>            ] 12.0 MiB / 32.0 MiB  4.0 MiB/s  ETA 0:05`, fitted to `width` columns.
    ///
    /// On narrow terminals the bar goes first, then the ETA and the rate; the line is always shorter than
    /// `width`, so it never wraps (a wrapped line cannot be redrawn in place).
    static func barLine(_ progress: DownloadProgress, width: Int) -> String {
        let limit = max(width - 1, 1)
        let rate = ByteFormat.rate(progress.bytesPerSecond)
        let done = ByteFormat.size(progress.bytesOnDisk)
        var candidates: [String] = []
        if let total = progress.expectedLength {
            let percent = ByteFormat.percent(progress.bytesOnDisk, of: total)
            let head = String(repeating: " ", count: max(0, 4 - percent.count)) + percent + " "
            let totalText = ByteFormat.size(total)
            // Padded to the total's width, so that the bar does not shrink as the count grows.
            let sizes = String(repeating: " ", count: max(0, totalText.count - done.count)) + "\(done) / \(totalText)"
            var tail = "\(sizes)  \(rate)"
            if let remaining = progress.estimatedTimeRemaining { tail += "  ETA \(ByteFormat.duration(remaining))" }
            let barWidth = min(40, limit - head.count - tail.count - 3)
            if barWidth >= 10 {
                let fraction = min(max(progress.fractionCompleted ?? 0, 0), 1)
                let filled = Int(Double(barWidth) * fraction)
                var bar = String(repeating: "=", count: filled)
                if filled < barWidth { bar += ">" + String(repeating: " ", count: barWidth - filled - 1) }
                candidates.append(head + "[" + bar + "] " + tail)
            }
            candidates += [head + tail, head + "\(sizes)  \(rate)", head + sizes, percent]
        } else {
            candidates = ["\(done)  \(rate)", done]
        }
        let fitting = candidates.first { $0.count <= limit } ?? candidates.last ?? ""
        return String(fitting.prefix(limit))
    }

    /// `12.0 MiB of 32.0 MiB (37%) at 4.0 MiB/s`.
    static func plainLine(_ progress: DownloadProgress) -> String {
        let rate = ByteFormat.rate(progress.bytesPerSecond)
        guard let total = progress.expectedLength else {
            return "\(ByteFormat.size(progress.bytesOnDisk)) at \(rate)"
        }
        let percent = ByteFormat.percent(progress.bytesOnDisk, of: total)
        return "\(ByteFormat.size(progress.bytesOnDisk)) of \(ByteFormat.size(total)) (\(percent)) at \(rate)"
    }

    /// A line for people about an event other than progress, or `nil` for events not worth a line.
    static func describe(_ event: DownloadEvent) -> String? {
        switch event {
        case .started(_, let expectedLength):
            return expectedLength.map { "Receiving \(ByteFormat.size($0)) (\($0) bytes)" }
        case .resumed(let offset, let expectedLength):
            let total = expectedLength.map { " of \(ByteFormat.size($0))" } ?? ""
            return "Continuing at byte \(offset) (\(ByteFormat.size(offset))\(total))"
        case .restarted(let reason):
            return "Restarting from the beginning: \(reason)"
        case .reconciled(let tokenOffset, let bytesOnDisk):
            if bytesOnDisk == 0 {
                return "The partial file is missing or empty (the token said \(tokenOffset) bytes): starting again "
                    + "from the beginning"
            }
            return
                "The partial file holds \(bytesOnDisk) bytes, the token said \(tokenOffset); continuing from \(bytesOnDisk)"
        case .retrying(let attempt, let delay, let error):
            return "Retrying in \(ByteFormat.seconds(delay)) (attempt \(attempt)): \(error.message)"
        case .segmentFailed(let connection, let remaining, let error):
            return
                "Connection \(connection) stopped with \(ByteFormat.size(remaining.upperBound - remaining.lowerBound)) "
                + "of its segment left: \(error.message)"
        case .progress, .finished, .segmentStarted:
            return nil
        }
    }
}
