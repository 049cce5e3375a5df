import Foundation
import Resumable

/// `resumable inspect TOKEN`: shows what a resume token says and whether its temporary file matches.
struct InspectCommand: CLICommand {
    static let spec = CommandSpec(
        name: "inspect",
        abstract: "Show what a resume token holds and whether its partial file is intact.",
        arguments: [
            .positional("token", help: "The resume token file."),
            .flag("json", help: "Print one JSON object instead of text."),
        ],
        discussion: """
            Reads and validates the token without changing any file, and runs exactly the checks 'resume' runs on \
            its temporary file (the library's own). Exits with 0 when 'resume TOKEN' would continue; otherwise with \
            the status 'resume TOKEN' would exit with: 65 for a token that is malformed, from a newer version, \
            naming a file this tool must not touch, whose temporary file is gone (resume then needs -o PATH), or \
            whose download already finished; 75 when another download holds the temporary file.
            """
    )

    /// How the temporary file compares with the token: the library's own verdict, the one `resume` acts on.
    struct Verdict {
        /// `consistent`, `shorter`, `longer`, `missing`, `finished` or `refused`.
        let state: String
        /// The sentence shown in the text report.
        let sentence: String
        /// The temporary file's size, when present.
        let size: Int64?
        /// The exit status: 0 when `resume TOKEN` would continue, else what `resume TOKEN` would exit with.
        let exitCode: ExitCode
        /// Why `resume TOKEN` would refuse, when it would.
        let error: ResumableError?

        /// `listsRanges`: the token lists ranges beyond its offset (version 2), which a resume keeps too.
        init(_ report: PartialFileReport, listsRanges: Bool) {
            size = report.size
            let bytes = report.size ?? 0
            let kept = report.keptBytes ?? 0
            let reference = listsRanges ? "the listed ranges, which end at byte \(report.listedEnd)" : "the offset"
            switch report.state {
            case .consistent:
                (state, sentence, exitCode, error) = (
                    "consistent", "present, \(bytes) bytes: consistent with \(reference)", .success, nil
                )
            case .shorter:
                let then =
                    listsRanges
                    ? "a resume keeps the \(kept) listed bytes it still holds and asks for the rest"
                    : "a resume continues from byte \(bytes)"
                (state, sentence, exitCode, error) = (
                    "shorter", "present, \(bytes) bytes: shorter than \(reference); \(then)", .success, nil
                )
            case .longer:
                let then =
                    listsRanges
                    ? "a resume first cuts it to \(report.listedEnd) bytes, keeping the \(kept) bytes listed"
                    : "a resume first cuts it to \(report.listedEnd) bytes"
                (state, sentence, exitCode, error) = (
                    "longer", "present, \(bytes) bytes: longer than \(reference); \(then)", .success, nil
                )
            case .missing:
                (state, sentence, exitCode, error) = (
                    "missing",
                    "missing: nothing proves the token's destination is yours; a resume starts over from byte 0 "
                        + "only into a destination you choose (resumable resume TOKEN -o PATH)",
                    ExitCode.dataError, nil
                )
            case .finished(let path):
                (state, sentence, exitCode, error) = (
                    "finished",
                    "gone: the download already finished" + (path.map { " ('\($0)')" } ?? "") + "; nothing to resume",
                    ExitCode.dataError, nil
                )
            case .refused(let refusal):
                (state, sentence, exitCode, error) = (
                    "refused", "a resume refuses this token: \(refusal.message)", ExitCode.forError(refusal), refusal
                )
            }
        }
    }

    /// The token file.
    let tokenURL: URL
    /// `--json`.
    let json: Bool

    init(arguments: ParsedArguments) throws(UsageError) {
        let path = arguments.positional("token") ?? ""
        guard !path.isEmpty else { throw UsageError("missing argument <token>") }
        tokenURL = URL(fileURLWithPath: path, isDirectory: false)
        json = arguments.flag("json")
    }

    func run() async -> ExitCode {
        let token: ResumeToken
        do {
            token = try ResumeToken(contentsOf: tokenURL)
        } catch {
            if json {
                Console.out(
                    JSONValue.object([
                        ("status", .string("invalid")), ("token", .string(tokenURL.path)),
                        ("error", EventJSON.error(error)), ("exitCode", .int(Int64(ExitCode.dataError.rawValue))),
                    ]).serialized)
            } else {
                Console.err("error: \(error.message)")
            }
            return .dataError
        }
        // Exactly the checks `resume` runs, from the library.
        let verdict = Verdict(Reconciliation.inspect(token), listsRanges: !token.completedRanges.isEmpty)
        if json {
            Console.out(Self.jsonReport(token, verdict: verdict, tokenURL: tokenURL).serialized)
        } else {
            Console.out(Self.textReport(token, verdict: verdict, tokenURL: tokenURL))
        }
        return verdict.exitCode
    }

    private static func textReport(
        _ token: ResumeToken, verdict: Verdict, tokenURL: URL
    ) -> String {
        var lines: [(String, String)] = [
            ("Token", tokenURL.path),
            ("URL", token.url.absoluteString),
        ]
        if token.originalURL != token.url {
            lines.append(("Original URL", token.originalURL.absoluteString))
        }
        let listed = token.bytesCovered
        let ranges =
            token.completedRanges.isEmpty
            ? "" : " listed: the first \(token.offset) and \(token.completedRanges.count) ranges beyond them"
        if let total = token.expectedLength {
            lines.append(
                (
                    "Progress",
                    "\(listed) of \(total) bytes (\(ByteFormat.precisePercent(listed, of: total)))\(ranges)"
                ))
        } else {
            lines.append(("Progress", "\(token.offset) bytes (total unknown)"))
        }
        lines.append(("ETag", token.etag ?? "(none)"))
        lines.append(("Last-Modified", token.lastModified ?? "(none)"))
        if token.serverAdvisesAgainstRanges {
            lines.append(("Accept-Ranges", "none (the server advises against resuming; a resume may start over)"))
        }
        lines.append(("Temporary file", token.tempPath))
        lines.append(("  state", verdict.sentence))
        lines.append(("Destination", destination(of: token)))
        if let finalName = token.finalName {
            lines.append(("  final name", "\(finalName) (a free name: the destination's own was taken)"))
        }
        lines.append(("Created", timestamp(token.createdAt)))
        lines.append(("Updated", timestamp(token.updatedAt)))
        if !token.headers.isEmpty {
            lines.append(("Headers", token.headers.keys.sorted().joined(separator: ", ")))
        }
        // Every value may come from the token (a hostile one, too): escaped, so none can control the terminal.
        return lines.map {
            ($0.0 + ":").padding(toLength: 16, withPad: " ", startingAt: 0) + TerminalText.escaped($0.1)
        }
        .joined(separator: "\n")
    }

    private static func destination(of token: ResumeToken) -> String {
        guard let destination = token.destination else {
            return "the temporary file's directory, as '\(token.suggestedFilename)'"
        }
        if destination.hasSuffix("/") {
            return "\(destination) (directory; the file will be named '\(token.suggestedFilename)')"
        }
        return destination
    }

    private static func timestamp(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }

    private static func jsonReport(
        _ token: ResumeToken, verdict: Verdict, tokenURL: URL
    ) -> JSONValue {
        // The token itself, exactly in its documented JSON form (re-serialized on one line).
        var tokenJSON = JSONValue.null
        if let object = try? JSONSerialization.jsonObject(with: token.jsonData()),
            let compact = try? JSONSerialization.data(
                withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        {
            tokenJSON = .raw(String(decoding: compact, as: UTF8.self))
        }
        var fraction = JSONValue.null
        if let total = token.expectedLength, total > 0 {
            fraction = .double(Double(token.bytesCovered) / Double(total))
        }
        return .object([
            ("status", .string("valid")),
            ("tokenFile", .string(tokenURL.path)),
            ("offset", .int(token.offset)),
            ("expectedLength", .int(token.expectedLength)),
            ("fractionCompleted", fraction),
            (
                "temporaryFile",
                .object([
                    ("path", .string(token.tempPath)),
                    ("state", .string(verdict.state)),
                    ("size", .int(verdict.size)),
                    ("error", verdict.error.map(EventJSON.error) ?? .null),
                ])
            ),
            ("token", tokenJSON),
            ("exitCode", .int(Int64(verdict.exitCode.rawValue))),
        ])
    }
}
