import Foundation

/// The values a command line gave, looked up by the names in the ``CommandSpec``.
struct ParsedArguments: Sendable {
    /// The flags that were given.
    var flags: Set<String> = []
    /// Option values by option name, in command-line order.
    var options: [String: [String]] = [:]
    /// Positional values by name.
    var positionals: [String: String] = [:]

    /// Whether the flag was given.
    func flag(_ name: String) -> Bool {
        flags.contains(name)
    }

    /// The value of a single-valued option, if given.
    func value(_ name: String) -> String? {
        options[name]?.last
    }

    /// Every value of a repeatable option, in order.
    func values(_ name: String) -> [String] {
        options[name] ?? []
    }

    /// A positional value, if given.
    func positional(_ name: String) -> String? {
        positionals[name]
    }

    /// The option's value as an integer in `range`, if given.
    func integer(_ name: String, in range: ClosedRange<Int>) throws(UsageError) -> Int? {
        guard let text = value(name) else { return nil }
        guard let number = Int(text), range.contains(number) else {
            throw UsageError(
                "option '--\(name)' needs an integer from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
        }
        return number
    }

    /// The option's value as a positive number of seconds (fractions allowed), if given.
    func seconds(_ name: String) throws(UsageError) -> Duration? {
        guard let text = value(name) else { return nil }
        guard let number = Double(text), number.isFinite, number > 0, number <= 86_400 else {
            throw UsageError("option '--\(name)' needs a number of seconds greater than 0, not '\(text)'")
        }
        return .milliseconds(Int64((number * 1000).rounded(.up)))
    }

    /// The option's value as a byte rate such as `500000`, `512k`, `16M` or `1G` (binary multiples), if given.
    func byteRate(_ name: String) throws(UsageError) -> Int? {
        guard let text = value(name) else { return nil }
        let multipliers: [Character: Int] = [
            "k": 1 << 10, "K": 1 << 10, "m": 1 << 20, "M": 1 << 20, "g": 1 << 30, "G": 1 << 30,
        ]
        var digits = Substring(text)
        var multiplier = 1
        if let last = digits.last, let factor = multipliers[last] {
            multiplier = factor
            digits = digits.dropLast()
        }
        guard let number = Int(digits), number > 0, number <= Int(Int32.max) / multiplier else {
            throw UsageError("option '--\(name)' needs a rate in bytes per second such as 512k or 16M, not '\(text)'")
        }
        return number * multiplier
    }

    /// The option's value as a bandwidth limit in curl's `--limit-rate` syntax, if given: a whole number of bytes per
    /// second, optionally followed by one of `k`/`K`, `m`/`M`, `g`/`G` (1024, 1024², 1024³). Zero, a sign, a
    /// fraction, spaces, another suffix, or a value beyond `Int.max` bytes per second is a ``UsageError``.
    func limitRate(_ name: String) throws(UsageError) -> Int? {
        guard let text = value(name) else { return nil }
        let failure = UsageError(
            "option '--\(name)' needs a rate in bytes per second greater than 0, optionally with a suffix k, m or g "
                + "(powers of 1024), such as 500000, 512k or 2M; not '\(text)'")
        var digits = Substring(text)
        var multiplier = 1
        switch digits.last {
        case "k", "K": multiplier = 1 << 10
        case "m", "M": multiplier = 1 << 20
        case "g", "G": multiplier = 1 << 30
        default: break
        }
        if multiplier > 1 { digits = digits.dropLast() }
        // Digits only: `Int(_:)` would also take a sign.
        guard !digits.isEmpty, digits.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            let number = Int(digits), number > 0
        else { throw failure }
        let (rate, overflow) = number.multipliedReportingOverflow(by: multiplier)
        guard !overflow else { throw failure }
        return rate
    }
}
