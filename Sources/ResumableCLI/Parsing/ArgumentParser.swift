/// One argument a command accepts: a flag, an option with a value, a repeatable option, or a positional.
struct ArgumentSpec: Sendable {
    /// What sort of argument this is.
    enum Kind: Sendable, Equatable {
        /// `--name` alone.
        case flag
        /// `--name VALUE` or `--name=VALUE`, at most once.
        case option
        /// `--name VALUE`, any number of times, in order.
        case repeatableOption
        /// A value given by position.
        case positional(optional: Bool)
    }

    /// What sort of argument this is.
    let kind: Kind
    /// The long name without dashes (options and flags) or the value name (positionals); also the lookup key.
    let name: String
    /// The one-letter short name, if any (`-o`).
    let short: Character?
    /// The placeholder shown in help, e.g. `path`.
    let valueName: String
    /// One or two sentences for `--help`.
    let help: String

    /// A flag, `--name`.
    static func flag(_ name: String, short: Character? = nil, help: String) -> ArgumentSpec {
        ArgumentSpec(kind: .flag, name: name, short: short, valueName: "", help: help)
    }

    /// An option that takes one value, at most once.
    static func option(_ name: String, short: Character? = nil, value: String, help: String) -> ArgumentSpec {
        ArgumentSpec(kind: .option, name: name, short: short, valueName: value, help: help)
    }

    /// An option that takes one value and may be given any number of times.
    static func repeatable(_ name: String, short: Character? = nil, value: String, help: String) -> ArgumentSpec {
        ArgumentSpec(kind: .repeatableOption, name: name, short: short, valueName: value, help: help)
    }

    /// A positional argument.
    static func positional(_ name: String, optional: Bool = false, help: String) -> ArgumentSpec {
        ArgumentSpec(kind: .positional(optional: optional), name: name, short: nil, valueName: name, help: help)
    }

    /// Whether this is a positional argument.
    var isPositional: Bool {
        if case .positional = kind { return true }
        return false
    }

    /// `-o, --output <path>` or `<url>`, as shown in help.
    var displayName: String {
        switch kind {
        case .positional(let optional):
            return optional ? "[<\(valueName)>]" : "<\(valueName)>"
        case .flag:
            return (short.map { "-\($0), " } ?? "") + "--\(name)"
        case .option, .repeatableOption:
            return (short.map { "-\($0), " } ?? "") + "--\(name) <\(valueName)>"
        }
    }
}

/// A command's name, documentation and arguments: everything the parser and the help text need.
struct CommandSpec: Sendable {
    /// The subcommand's name, e.g. `get`.
    let name: String
    /// A one-line summary.
    let abstract: String
    /// The arguments, in the order shown in help.
    let arguments: [ArgumentSpec]
    /// Further explanation shown at the end of `--help`.
    let discussion: String

    /// Creates a spec; every command gets `-h, --help` in addition to `arguments`.
    init(name: String, abstract: String, arguments: [ArgumentSpec], discussion: String = "") {
        self.name = name
        self.abstract = abstract
        self.arguments = arguments
        self.discussion = discussion
    }
}

/// A command line that does not match the command's spec; reported with the usage line, exit status 64.
struct UsageError: Error, Sendable, Equatable {
    /// What is wrong, e.g. `unknown option '--fast'`.
    let message: String

    init(_ message: String) {
        self.message = message
    }
}

/// What a parse produced: arguments to run with, or a request for help.
enum ParseOutcome: Sendable {
    /// The arguments matched the spec.
    case arguments(ParsedArguments)
    /// `-h` or `--help` was given.
    case help
}

/// A small declarative parser in the spirit of swift-argument-parser.
///
/// Supports long options with a separate or `=`-joined value (`--output x`, `--output=x`), short options with a
/// separate value (`-o x`), flags, repeatable options, positionals, `--` to end options, and `-h`/`--help`
/// anywhere before `--`. Anything else is a ``UsageError`` naming the argument at fault.
enum ArgumentParser {
    /// Parses `arguments` (without the tool and command names) against `spec`.
    static func parse(_ arguments: [String], for spec: CommandSpec) throws(UsageError) -> ParseOutcome {
        let beforeTerminator = arguments.prefix { $0 != "--" }
        if beforeTerminator.contains(where: { $0 == "--help" || $0 == "-h" }) { return .help }

        var parsed = ParsedArguments()
        var positionalValues: [String] = []
        var index = 0
        var optionsEnded = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if optionsEnded || argument == "-" || !argument.hasPrefix("-") {
                positionalValues.append(argument)
                continue
            }
            if argument == "--" {
                optionsEnded = true
                continue
            }
            let (spec, inlineValue) = try lookUp(argument, in: spec)
            switch spec.kind {
            case .flag:
                if inlineValue != nil { throw UsageError("flag '--\(spec.name)' does not take a value") }
                parsed.flags.insert(spec.name)
            case .option, .repeatableOption:
                let value: String
                if let inlineValue {
                    value = inlineValue
                } else {
                    guard index < arguments.count, !looksLikeOption(arguments[index]) else {
                        throw UsageError("option '\(argument)' needs a value <\(spec.valueName)>")
                    }
                    value = arguments[index]
                    index += 1
                }
                if spec.kind == .option, parsed.options[spec.name] != nil {
                    throw UsageError("option '--\(spec.name)' may be given only once")
                }
                parsed.options[spec.name, default: []].append(value)
            case .positional:
                throw UsageError("unknown option '\(argument)'")
            }
        }

        let positionals = spec.arguments.filter(\.isPositional)
        for (position, value) in positionalValues.enumerated() {
            guard position < positionals.count else {
                throw UsageError("unexpected argument '\(value)'")
            }
            parsed.positionals[positionals[position].name] = value
        }
        for positional in positionals.dropFirst(positionalValues.count) {
            if case .positional(optional: false) = positional.kind {
                throw UsageError("missing argument <\(positional.valueName)>")
            }
        }
        return .arguments(parsed)
    }

    /// `-x` or `--x`, but not `-` alone or a negative number (left for the option's own validation).
    private static func looksLikeOption(_ argument: String) -> Bool {
        guard argument.hasPrefix("-"), let second = argument.dropFirst().first else { return false }
        return !second.isNumber
    }

    private static func lookUp(
        _ argument: String, in command: CommandSpec
    ) throws(UsageError) -> (ArgumentSpec, String?) {
        if argument.hasPrefix("--") {
            let body = argument.dropFirst(2)
            let name: Substring
            let value: String?
            if let equals = body.firstIndex(of: "=") {
                name = body[..<equals]
                value = String(body[body.index(after: equals)...])
            } else {
                name = body
                value = nil
            }
            guard let spec = command.arguments.first(where: { !$0.isPositional && $0.name == name }) else {
                throw UsageError("unknown option '--\(name)'")
            }
            return (spec, value)
        }
        let letters = argument.dropFirst()
        guard letters.count == 1, let letter = letters.first,
            let spec = command.arguments.first(where: { $0.short == letter })
        else {
            throw UsageError("unknown option '\(argument)'")
        }
        return (spec, nil)
    }
}
