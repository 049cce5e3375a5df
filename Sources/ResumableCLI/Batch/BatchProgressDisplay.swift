import Foundation

/// What the progress display of a batch (`resumable get -i LIST -j N`) shows at one moment.
struct BatchSnapshot: Sendable, Equatable {
    /// One download that is under way.
    struct Download: Sendable, Equatable {
        /// What the download is doing.
        enum State: Sendable, Equatable {
            /// Waiting for the first answer.
            case connecting
            /// Receiving the body.
            case receiving
            /// Waiting to try again after a transient failure (`attempt` counts from 1).
            case retrying(attempt: Int)
            /// Checking the finished file's SHA-256.
            case verifying
        }

        /// The name shown: the output name, or the URL's last path component until the server's name is known.
        /// Text from outside: it is escaped before it is shown.
        var name: String
        /// Bytes of the file on disk.
        var bytesOnDisk: Int64
        /// The size of the whole file, when known.
        var expectedLength: Int64?
        /// The recent rate, in bytes per second.
        var bytesPerSecond: Double
        /// What the download is doing.
        var state: State

        init(
            name: String, bytesOnDisk: Int64 = 0, expectedLength: Int64? = nil, bytesPerSecond: Double = 0,
            state: State = .receiving
        ) {
            self.name = name
            self.bytesOnDisk = bytesOnDisk
            self.expectedLength = expectedLength
            self.bytesPerSecond = bytesPerSecond
            self.state = state
        }
    }

    /// The downloads under way, in the order shown.
    var active: [Download]
    /// Downloads finished.
    var filesDone: Int
    /// Downloads failed.
    var filesFailed: Int
    /// Downloads in the list.
    var filesTotal: Int
    /// Bytes on disk over all downloads, finished and active.
    var bytesOnDisk: Int64
    /// The size of all files together, when every size is known.
    var expectedBytes: Int64?
    /// The recent rate over all downloads, in bytes per second.
    var bytesPerSecond: Double
    /// The estimated time until every download is done, when known.
    var estimatedTimeRemaining: Duration?

    init(
        active: [Download] = [], filesDone: Int = 0, filesFailed: Int = 0, filesTotal: Int, bytesOnDisk: Int64 = 0,
        expectedBytes: Int64? = nil, bytesPerSecond: Double = 0, estimatedTimeRemaining: Duration? = nil
    ) {
        self.active = active
        self.filesDone = filesDone
        self.filesFailed = filesFailed
        self.filesTotal = filesTotal
        self.bytesOnDisk = bytesOnDisk
        self.expectedBytes = expectedBytes
        self.bytesPerSecond = bytesPerSecond
        self.estimatedTimeRemaining = estimatedTimeRemaining
    }
}

/// Something that happened to one download of a batch and is worth a line of its own.
enum BatchEvent: Sendable, Equatable {
    /// The download began; `expectedLength` when the server announced it.
    case started(name: String, expectedLength: Int64?)
    /// The file is complete and in place.
    case finished(name: String, bytes: Int64)
    /// The download stopped for good; `message` says why (text from outside, escaped when shown).
    case failed(name: String, message: String)
}

/// The text of a batch's progress display: pure functions of a ``BatchSnapshot``, written to standard error by the
/// command.
///
/// On a terminal, ``redraw(_:events:width:height:)`` returns what redraws a block in place: one line per active
/// download and a total line at the bottom, each cut to fit the width, so that no line wraps (a wrapped line
/// cannot be redrawn in place). Event lines (`Finished x (12.0 MiB)`) are written above the block and stay. The
/// cursor is left at the start of the line below the block, and the next redraw moves up over the block again:
/// so nothing else may be written to the terminal while a block is shown; call ``erase()`` first, write, and
/// redraw.
///
/// Not on a terminal, ``plainLines(for:)`` gives one line per event and ``totalLine(_:)`` the total, which the
/// command writes now and then (``RedrawThrottle/plainInterval``).
///
/// Names and messages come from outside (a server's file name, an error's reason phrase): they are escaped with
/// ``TerminalText`` before anything else, so they cannot carry a terminal sequence.
struct BatchProgressDisplay: Sendable {
    /// The number of lines the last redraw wrote, which the next one moves up over.
    private(set) var drawnLines = 0

    /// The most download lines shown when the terminal's height is unknown.
    static let defaultMaximumDownloadLines = 20

    init() {}

    /// What redraws the block for `snapshot` in place, with `events` written above it first.
    ///
    /// `width` and `height` are the terminal's size in columns and rows (`height` `nil` when unknown). When more
    /// downloads are active than fit (`height - 2` lines, at most ``defaultMaximumDownloadLines`` when the height is
    /// unknown), the last download line says how many more there are.
    mutating func redraw(_ snapshot: BatchSnapshot, events: [BatchEvent] = [], width: Int, height: Int? = nil)
        -> String
    {
        var output = moveToBlock()
        // Event lines may be wider than the terminal and wrap: clear everything first, then nothing old shows
        // through. Without events, each line clears its own rest, so the block does not flicker.
        if !events.isEmpty { output += Self.clearToEnd }
        for event in events {
            output += Self.eventLine(event) + "\n"
        }
        let lines = Self.blockLines(snapshot, width: width, height: height)
        for line in lines {
            output += line + Self.clearLine + "\n"
        }
        output += Self.clearToEnd
        drawnLines = lines.count
        return output
    }

    /// What removes the block, leaving the cursor where its first line was: before other output and at the end.
    mutating func erase() -> String {
        guard drawnLines > 0 else { return "" }
        let output = moveToBlock() + Self.clearToEnd
        drawnLines = 0
        return output
    }

    /// The lines of the block, without terminal sequences: a line per shown download, then the total.
    static func blockLines(_ snapshot: BatchSnapshot, width: Int, height: Int? = nil) -> [String] {
        // Sizes come from an ioctl: any Int, so no arithmetic here may overflow.
        let limit = width > 1 ? width - 1 : 1
        let maximum = height.map { $0 > 2 ? $0 - 2 : 1 } ?? defaultMaximumDownloadLines
        var shown = snapshot.active
        var hidden = 0
        if shown.count > maximum {
            hidden = shown.count - (maximum - 1)
            shown = Array(shown.prefix(maximum - 1))
        }
        let names = shown.map { TerminalText.escaped($0.name) }
        let longest = names.map(DisplayWidth.columns).max() ?? 0
        let nameColumns = min(longest, max(8, limit / 4))
        var lines = zip(shown, names).map { download, name in
            downloadLine(download, name: name, nameColumns: nameColumns, limit: limit)
        }
        if hidden > 0 {
            let text = shown.isEmpty ? "\(hidden) downloads active" : "… and \(hidden) more"
            lines.append(DisplayWidth.prefix(text, columns: limit))
        }
        lines.append(terminalTotalLine(snapshot, limit: limit))
        return lines
    }

    /// One line per event, for standard error when it is not a terminal.
    static func plainLines(for events: [BatchEvent]) -> [String] {
        events.map(eventLine)
    }

    /// `Started disk.iso (3.5 GiB)`, `Finished disk.iso (3.5 GiB)`, `Failed disk.iso: the server answered 404`.
    static func eventLine(_ event: BatchEvent) -> String {
        switch event {
        case .started(let name, let expectedLength):
            return "Started \(TerminalText.escaped(name))" + (expectedLength.map { " (\(ByteFormat.size($0)))" } ?? "")
        case .finished(let name, let bytes):
            return "Finished \(TerminalText.escaped(name)) (\(ByteFormat.size(bytes)))"
        case .failed(let name, let message):
            return "Failed \(TerminalText.escaped(name)): \(TerminalText.escaped(message))"
        }
    }

    /// `3 of 10 files done, 1 failed, 2 active; 1.2 GiB of 3.4 GiB (35%) at 12.0 MiB/s, ETA 3:05`: the periodic
    /// line when not on a terminal, and a summary at the end.
    static func totalLine(_ snapshot: BatchSnapshot) -> String {
        var files = "\(snapshot.filesDone) of \(snapshot.filesTotal) files done"
        if snapshot.filesFailed > 0 { files += ", \(snapshot.filesFailed) failed" }
        if !snapshot.active.isEmpty { files += ", \(snapshot.active.count) active" }
        var bytes = ByteFormat.size(snapshot.bytesOnDisk)
        if let total = snapshot.expectedBytes {
            bytes += " of \(ByteFormat.size(total)) (\(ByteFormat.percent(snapshot.bytesOnDisk, of: total)))"
        }
        bytes += " at \(ByteFormat.rate(snapshot.bytesPerSecond))"
        if let remaining = snapshot.estimatedTimeRemaining { bytes += ", ETA \(ByteFormat.duration(remaining))" }
        return files + "; " + bytes
    }

    // MARK: - Lines

    /// `name      37% [=====>      ] 12.0 MiB / 32.0 MiB  4.0 MiB/s`, within `limit` columns.
    private static func downloadLine(
        _ download: BatchSnapshot.Download, name: String, nameColumns: Int, limit: Int
    ) -> String {
        let shownName = DisplayWidth.middleTruncated(name, columns: nameColumns)
        let head =
            shownName + String(repeating: " ", count: max(0, nameColumns - DisplayWidth.columns(shownName))) + "  "
        let room = limit - DisplayWidth.columns(head)
        let candidates = statusCandidates(download, room: room)
        if let fitting = candidates.first(where: { DisplayWidth.columns($0) <= room }) {
            return head + fitting
        }
        return DisplayWidth.prefix(head + (candidates.last ?? ""), columns: limit)
    }

    /// Columns of a receiving line's status without its bar: ` 37% [` + `] ` + `999.9 MiB / 999.9 MiB  999.9 MiB/s`.
    private static let typicalStatusColumns = 6 + 2 + 36

    /// What follows the name, longest first.
    private static func statusCandidates(_ download: BatchSnapshot.Download, room: Int) -> [String] {
        let done = ByteFormat.size(download.bytesOnDisk)
        let rate = ByteFormat.rate(download.bytesPerSecond)
        var sizes = done
        var percent: String?
        var fraction: Double?
        if let total = download.expectedLength {
            let totalText = ByteFormat.size(total)
            sizes = String(repeating: " ", count: max(0, totalText.count - done.count)) + "\(done) / \(totalText)"
            let text = ByteFormat.percent(download.bytesOnDisk, of: total)
            percent = String(repeating: " ", count: max(0, 4 - text.count)) + text
            fraction = total > 0 ? min(max(Double(download.bytesOnDisk) / Double(total), 0), 1) : 1
        }
        switch download.state {
        case .connecting:
            return ["connecting"]
        case .verifying:
            return ["verifying SHA-256", "verifying"]
        case .retrying(let attempt):
            let retry = "retrying (attempt \(attempt))"
            return [sizes + "  " + retry, retry, "retrying"]
        case .receiving:
            guard let percent, let fraction else { return ["\(sizes)  \(rate)", sizes] }
            var candidates: [String] = []
            let tail = "\(sizes)  \(rate)"
            // The same width on every line, from the room alone, so that the bars line up; a line whose numbers are
            // longer than usual drops its bar instead.
            let barWidth = min(20, room - typicalStatusColumns)
            if barWidth >= 8 {
                let filled = Int(Double(barWidth) * fraction)
                var bar = String(repeating: "=", count: filled)
                if filled < barWidth { bar += ">" + String(repeating: " ", count: barWidth - filled - 1) }
                candidates.append("\(percent) [\(bar)] \(tail)")
            }
            return candidates + ["\(percent)  \(tail)", "\(percent)  \(sizes)", percent]
        }
    }

    /// `Total  3/10 done  1 failed  1.2 GiB / 3.4 GiB  12.0 MiB/s  ETA 3:05`, within `limit` columns.
    private static func terminalTotalLine(_ snapshot: BatchSnapshot, limit: Int) -> String {
        var files = "\(snapshot.filesDone)/\(snapshot.filesTotal) done"
        if snapshot.filesFailed > 0 { files += ", \(snapshot.filesFailed) failed" }
        let done = ByteFormat.size(snapshot.bytesOnDisk)
        let sizes = snapshot.expectedBytes.map { "\(done) / \(ByteFormat.size($0))" } ?? done
        let rate = ByteFormat.rate(snapshot.bytesPerSecond)
        let eta = snapshot.estimatedTimeRemaining.map { "  ETA \(ByteFormat.duration($0))" } ?? ""
        let candidates = [
            "Total  \(files)  \(sizes)  \(rate)\(eta)",
            "Total  \(files)  \(sizes)  \(rate)",
            "Total  \(files)  \(sizes)",
            "\(files)  \(sizes)",
            files,
        ]
        let fitting = candidates.first { $0.count <= limit } ?? candidates[candidates.count - 1]
        return DisplayWidth.prefix(fitting, columns: limit)
    }

    // MARK: - Terminal sequences

    /// Clears from the cursor to the end of the line.
    static let clearLine = "\u{1B}[K"
    /// Clears from the cursor to the end of the screen.
    static let clearToEnd = "\u{1B}[J"

    /// To the start of the block's first line (the cursor is on the line below the block).
    private func moveToBlock() -> String {
        // `ESC [ 0 A` moves up one line on most terminals: a count of zero must not be sent.
        drawnLines > 0 ? "\r\u{1B}[\(drawnLines)A" : "\r"
    }
}

/// How often a display is redrawn: a pure rule, given the time of each request.
///
/// The display asks with ``request(at:)`` whenever something changed; the answer is yes at most once per
/// `interval`. A refused request is remembered (``isPending``): the command draws it at ``due``, from a timer, so
/// the last change is never left undrawn.
struct RedrawThrottle: Sendable, Equatable {
    /// A terminal's block: at most ten redraws a second.
    static let terminalInterval = Duration.milliseconds(100)
    /// The total line when not on a terminal, like the single download's plain progress line.
    static let plainInterval = Duration.seconds(5)

    /// The shortest time between two draws.
    let interval: Duration
    /// When the last draw was allowed.
    private(set) var lastDraw: ContinuousClock.Instant?
    /// Whether a request was refused since the last draw.
    private(set) var isPending = false

    /// A throttle whose first request is allowed at once; with `startingAt`, the first is allowed only `interval`
    /// after it (the plain total line, which is not wanted the moment the batch starts).
    init(interval: Duration, startingAt start: ContinuousClock.Instant? = nil) {
        self.interval = interval
        self.lastDraw = start
    }

    /// Whether to draw now; a refusal marks the draw pending.
    mutating func request(at now: ContinuousClock.Instant) -> Bool {
        if let lastDraw, now - lastDraw < interval {
            isPending = true
            return false
        }
        lastDraw = now
        isPending = false
        return true
    }

    /// When a pending draw may happen, or `nil` when none is pending.
    var due: ContinuousClock.Instant? {
        guard isPending, let lastDraw else { return nil }
        return lastDraw + interval
    }
}

/// Terminal columns of text, for fitting lines to a width.
///
/// A wide character (CJK, most emoji) takes two columns. Exact widths depend on the terminal, so this errs on the
/// wide side: counting a character too wide makes a line shorter than it could be, counting it too narrow makes it
/// wrap and breaks the redraw in place. East Asian "ambiguous" characters (`…`, `→`) count one column, as most
/// terminals show them; lines are kept a column short of the width, which absorbs one such character drawn wide.
enum DisplayWidth {
    /// Columns of `text`: two per possibly wide character, one per other character.
    static func columns(_ text: String) -> Int {
        text.reduce(0) { $0 + columns($1) }
    }

    /// Columns of one character.
    static func columns(_ character: Character) -> Int {
        if character.isASCII { return 1 }
        return character.unicodeScalars.contains(where: isPossiblyWide) ? 2 : 1
    }

    /// The longest prefix of `text` within `columns`.
    static func prefix(_ text: String, columns limit: Int) -> String {
        var used = 0
        var end = text.startIndex
        for character in text {
            used += columns(character)
            guard used <= limit else { break }
            end = text.index(after: end)
        }
        return String(text[..<end])
    }

    /// The longest suffix of `text` within `columns`.
    static func suffix(_ text: String, columns limit: Int) -> String {
        var used = 0
        var start = text.endIndex
        for character in text.reversed() {
            used += columns(character)
            guard used <= limit else { break }
            start = text.index(before: start)
        }
        return String(text[start...])
    }

    /// `text` within `columns`, cut in the middle (`very-long-na…ame.iso`) so that the extension stays.
    static func middleTruncated(_ text: String, columns limit: Int) -> String {
        guard columns(text) > limit else { return text }
        guard limit >= 5 else { return prefix(text, columns: limit) }
        let budget = limit - 1
        let head = prefix(text, columns: budget - budget / 2)
        let tail = suffix(text, columns: limit - 1 - columns(head))
        return head + "…" + tail
    }

    /// Whether `scalar` may take two columns: emoji presentation, the emoji variation selector, and anything from
    /// U+1100 on outside the blocks known to be narrow (Latin and Greek extended, punctuation and symbols, Arabic
    /// presentation forms).
    private static func isPossiblyWide(_ scalar: Unicode.Scalar) -> Bool {
        if scalar.properties.isEmojiPresentation || scalar == "\u{FE0F}" { return true }
        switch scalar.value {
        case ..<0x1100: return false
        case 0x1E00...0x1FFF, 0x2000...0x2BFF, 0xFB00...0xFDFF, 0xFE70...0xFEFF: return false
        default: return true
        }
    }
}
