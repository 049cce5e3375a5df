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
            Reads and validates the token without touching any file. Exits with 65 when the token is unusable: \
            missing, malformed, from a newer version, or naming a temporary file that is not a regular file.
            """
    )

    /// How the temporary file compares with the token.
    enum TemporaryFileState: String, Sendable {
        /// It holds exactly the token's offset.
        case consistent
        /// It holds fewer bytes: a resume continues from its size.
        case shorter
        /// It holds more bytes: a resume cuts it to the offset first.
        case longer
        /// It is gone: a resume starts over.
        case missing
        /// It is a symbolic link, a directory or another non-regular file: a resume refuses the token.
        case notRegularFile = "not-a-regular-file"
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
        let (state, size) = Self.temporaryFile(of: token)
        if json {
            Console.out(Self.jsonReport(token, state: state, size: size, tokenURL: tokenURL).serialized)
        } else {
            Console.out(Self.textReport(token, state: state, size: size, tokenURL: tokenURL))
        }
        return state == .notRegularFile ? .dataError : .success
    }

    /// The state and size of the token's temporary file, looked at without following links.
    static func temporaryFile(of token: ResumeToken) -> (TemporaryFileState, Int64?) {
        var status = stat()
        guard lstat(token.tempPath, &status) == 0 else { return (.missing, nil) }
        guard (status.st_mode & S_IFMT) == S_IFREG else { return (.notRegularFile, nil) }
        let size = Int64(status.st_size)
        if size == token.offset { return (.consistent, size) }
        return (size < token.offset ? .shorter : .longer, size)
    }

    private static func textReport(
        _ token: ResumeToken, state: TemporaryFileState, size: Int64?, tokenURL: URL
    ) -> String {
        var lines: [(String, String)] = [
            ("Token", tokenURL.path),
            ("URL", token.url.absoluteString),
        ]
        if token.originalURL != token.url {
            lines.append(("Original URL", token.originalURL.absoluteString))
        }
        if let total = token.expectedLength {
            lines.append(
                (
                    "Progress",
                    "\(token.offset) of \(total) bytes (\(ByteFormat.precisePercent(token.offset, of: total)))"
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
        lines.append(("  state", describe(state, size: size, offset: token.offset)))
        lines.append(("Destination", destination(of: token)))
        lines.append(("Created", timestamp(token.createdAt)))
        lines.append(("Updated", timestamp(token.updatedAt)))
        if !token.headers.isEmpty {
            lines.append(("Headers", token.headers.keys.sorted().joined(separator: ", ")))
        }
        return lines.map { ($0.0 + ":").padding(toLength: 16, withPad: " ", startingAt: 0) + $0.1 }
            .joined(separator: "\n")
    }

    private static func describe(_ state: TemporaryFileState, size: Int64?, offset: Int64) -> String {
        switch state {
        case .consistent:
            return "present, \(size ?? 0) bytes: consistent with the offset"
        case .shorter:
            return "present, \(size ?? 0) bytes: shorter than the offset; a resume continues from byte \(size ?? 0)"
        case .longer:
            return "present, \(size ?? 0) bytes: longer than the offset; a resume first cuts it to \(offset) bytes"
        case .missing:
            return "missing: a resume starts over from byte 0"
        case .notRegularFile:
            return "not a regular file: a resume refuses this token"
        }
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
        _ token: ResumeToken, state: TemporaryFileState, size: Int64?, tokenURL: URL
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
            fraction = .double(Double(token.offset) / Double(total))
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
                    ("state", .string(state.rawValue)),
                    ("size", .int(size)),
                ])
            ),
            ("token", tokenJSON),
            ("exitCode", .int(Int64(state == .notRegularFile ? ExitCode.dataError.rawValue : 0))),
        ])
    }
}
