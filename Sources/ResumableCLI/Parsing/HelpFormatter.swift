import Foundation

/// Builds `--help` text and usage lines from a ``CommandSpec``.
enum HelpFormatter {
    /// The tool's name as shown in help.
    static let toolName = "resumable"

    private static let helpArgument = ArgumentSpec.flag("help", short: "h", help: "Show help information.")
    private static let width = 100
    private static let column = 30

    /// `USAGE: resumable get <url> [--output <path>] …`
    static func usage(for spec: CommandSpec) -> String {
        var parts = ["\(toolName) \(spec.name)"]
        for argument in spec.arguments where argument.isPositional {
            parts.append(argument.displayName)
        }
        for argument in spec.arguments where !argument.isPositional {
            let long = argument.kind == .flag ? "--\(argument.name)" : "--\(argument.name) <\(argument.valueName)>"
            parts.append(argument.kind == .repeatableOption ? "[\(long) ...]" : "[\(long)]")
        }
        return wrap("USAGE: " + parts.joined(separator: " "), indent: 7)
    }

    /// The whole `--help` text.
    static func help(for spec: CommandSpec) -> String {
        var lines = wrapWords("OVERVIEW: \(spec.abstract)", width: width) + ["", usage(for: spec)]
        let positionals = spec.arguments.filter(\.isPositional)
        if !positionals.isEmpty {
            lines += ["", "ARGUMENTS:"]
            lines += positionals.map(entry)
        }
        lines += ["", "OPTIONS:"]
        lines += (spec.arguments.filter { !$0.isPositional } + [helpArgument]).map(entry)
        for paragraph in spec.discussion.components(separatedBy: "\n\n") where !paragraph.isEmpty {
            lines += [""] + wrapWords(paragraph, width: width)
        }
        return lines.joined(separator: "\n")
    }

    /// The message printed for a usage error: the error, the usage line, and where to find help.
    static func usageError(_ error: UsageError, for spec: CommandSpec?) -> String {
        guard let spec else {
            return "error: \(error.message)\n\n\(RootHelp.usage)\nSee '\(toolName) --help'."
        }
        return "error: \(error.message)\n\n\(usage(for: spec))\nSee '\(toolName) \(spec.name) --help'."
    }

    private static func entry(_ argument: ArgumentSpec) -> String {
        let name = "  " + argument.displayName
        let text = argument.kind == .repeatableOption ? argument.help + " Repeatable." : argument.help
        let body = wrapWords(text, width: width - column)
        var lines: [String] = []
        if name.count + 2 <= column {
            lines.append(name.padding(toLength: column, withPad: " ", startingAt: 0) + (body.first ?? ""))
        } else {
            lines.append(name)
            lines.append(String(repeating: " ", count: column) + (body.first ?? ""))
        }
        for line in body.dropFirst() {
            lines.append(String(repeating: " ", count: column) + line)
        }
        return lines.joined(separator: "\n")
    }

    private static func wrap(_ text: String, indent: Int) -> String {
        // Continuation lines are indented, so every line is wrapped short enough to stay within `width`.
        let lines = wrapWords(text, width: width - indent)
        guard let first = lines.first else { return text }
        return ([first] + lines.dropFirst().map { String(repeating: " ", count: indent) + $0 })
            .joined(separator: "\n")
    }

    /// Splits `text` into lines of at most `width` characters at spaces, keeping bracketed groups together.
    static func wrapWords(_ text: String, width: Int) -> [String] {
        var lines: [String] = []
        var current = ""
        for word in groupedWords(text) {
            if current.isEmpty {
                current = word
            } else if current.count + 1 + word.count <= width {
                current += " " + word
            } else {
                lines.append(current)
                current = word
            }
        }
        if !current.isEmpty { lines.append(current) }
        return lines
    }

    /// Words, where `[--output <path>]` counts as one.
    private static func groupedWords(_ text: String) -> [String] {
        var words: [String] = []
        var depth = 0
        var current = ""
        for character in text {
            if character == " ", depth == 0 {
                if !current.isEmpty { words.append(current) }
                current = ""
                continue
            }
            if character == "[" { depth += 1 }
            if character == "]" { depth = max(depth - 1, 0) }
            current.append(character)
        }
        if !current.isEmpty { words.append(current) }
        return words
    }
}
