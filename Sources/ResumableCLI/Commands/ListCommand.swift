import Foundation
import Resumable

/// `resumable list --state DIR`: what a batch's task store holds, without touching it.
struct ListCommand: CLICommand {
    static let spec = CommandSpec(
        name: "list",
        abstract: "Show the unfinished downloads of a batch's task store.",
        arguments: [
            .option("state", value: "dir", help: "The task store of the batch ('get -i LIST --state DIR')."),
            .flag("json", help: "One JSON object on standard output."),
        ],
        discussion: """
            Reads the store without opening it for writing: it works while the batch runs (the first line then \
            says so), and changes nothing. Each download shows its state (waiting, running, paused or failed), \
            the bytes its last checkpoint covers, the size when known, the rate of a running one (between its \
            last two checkpoints, by default a second apart), and its URL. Finished downloads are not listed: their records are removed. Records that cannot be read \
            are listed as problems; the exit status is then 65.
            """
    )

    let stateDirectory: URL
    let json: Bool

    init(arguments: ParsedArguments) throws(UsageError) {
        guard let path = arguments.value("state"), !path.isEmpty else { throw UsageError("missing option --state DIR") }
        stateDirectory = URL(fileURLWithPath: path, isDirectory: true)
        json = arguments.flag("json")
    }

    func run() async -> ExitCode {
        guard FileManager.default.fileExists(atPath: stateDirectory.appendingPathComponent("tasks").path) else {
            Console.err("error: \(stateDirectory.path) is not the state directory of a batch")
            return .dataError
        }
        let (items, problems, inUse) = TaskStore.listing(directory: stateDirectory)
        let adding = TaskStore.holdsAdditionMark(in: stateDirectory)
        if json {
            let downloads: [JSONValue] = items.map { item in
                var fields: [(String, JSONValue)] = [
                    ("id", .string(item.id.description)),
                    ("url", .string(HTTPURL.removingUserInfo(item.url).absoluteString)),
                    ("destination", .string(item.destination.tokenValue)),
                    ("state", .string(Self.stateName(item.state))),
                    ("bytesOnDisk", .int(item.bytesOnDisk)),
                    ("bytesPerSecond", .int(ByteFormat.wholeNumber(item.bytesPerSecond))),
                    ("priority", .int(Int64(item.priority))),
                ]
                if let length = item.expectedLength { fields.append(("expectedLength", .int(length))) }
                if case .failed(let error) = item.state { fields.append(("failure", .string(error.message))) }
                return .object(fields)
            }
            let object: JSONValue = .object([
                ("state", .string(stateDirectory.path)),
                ("running", .bool(inUse)),
                ("addingList", .bool(adding)),
                ("downloads", .array(downloads)),
                ("problems", .array(problems.map { .string($0.description) })),
            ])
            Console.out(object.serialized)
        } else {
            if inUse {
                Console.out("A batch is running on this store now; its progress is as of the last checkpoints.")
            }
            if adding {
                Console.out(
                    inUse
                        ? "The batch's list is still being added; its downloads start once it is complete."
                        : "This batch was interrupted while its list was being added, before any download started: "
                            + "run 'resumable get -i LIST --state \(stateDirectory.path)' again (with the list corrected if a line of it was refused)."
                )
            }
            if items.isEmpty { Console.out("No unfinished downloads.") }
            for item in items {
                let size = item.expectedLength.map { " / " + ByteFormat.size($0) } ?? ""
                var rate = ""
                if case .running = item.state { rate = "  " + ByteFormat.rate(item.bytesPerSecond) }
                let line =
                    "\(Self.stateName(item.state))  \(ByteFormat.size(item.bytesOnDisk))\(size)\(rate)  "
                    + HTTPURL.removingUserInfo(item.url).absoluteString + "  -> " + item.destination.tokenValue
                Console.out(TerminalText.escaped(line))
            }
            for problem in problems { Console.err("problem: " + TerminalText.escaped(problem.description)) }
        }
        return problems.isEmpty ? .success : .dataError
    }

    static func stateName(_ state: DownloadQueue.State) -> String {
        switch state {
        case .waiting: return "waiting"
        case .running: return "running"
        case .paused: return "paused"
        case .failed: return "failed"
        }
    }
}
