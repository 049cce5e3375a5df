import Foundation

/// A JSON value with ordered object keys, serialized compactly on one line.
///
/// The tool's JSON output is hand-assembled from these so that keys appear in a stable, documented order
/// (`"event"` first) and absent values are an explicit `null`.
enum JSONValue: Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([(String, JSONValue)])
    /// Already serialized JSON, embedded verbatim.
    case raw(String)

    /// A string, or `null` when `value` is `nil`.
    static func string(_ value: String?) -> JSONValue {
        value.map { .string($0) } ?? .null
    }

    /// A number, or `null` when `value` is `nil`.
    static func int(_ value: Int64?) -> JSONValue {
        value.map { .int($0) } ?? .null
    }

    /// The compact, single-line serialization.
    var serialized: String {
        var output = ""
        append(to: &output)
        return output
    }

    private func append(to output: inout String) {
        switch self {
        case .null:
            output += "null"
        case .bool(let value):
            output += value ? "true" : "false"
        case .int(let value):
            output += String(value)
        case .double(let value):
            output += value.isFinite ? String(format: "%.3f", value) : "null"
        case .string(let value):
            Self.appendQuoted(value, to: &output)
        case .array(let values):
            output += "["
            for (index, value) in values.enumerated() {
                if index > 0 { output += "," }
                value.append(to: &output)
            }
            output += "]"
        case .object(let members):
            output += "{"
            for (index, (key, value)) in members.enumerated() {
                if index > 0 { output += "," }
                Self.appendQuoted(key, to: &output)
                output += ":"
                value.append(to: &output)
            }
            output += "}"
        case .raw(let text):
            // Valid JSON holds such characters only inside strings, where the escape means the same.
            for scalar in text.unicodeScalars {
                if TerminalText.needsEscape(scalar, keepingLineBreaks: true) {
                    output += String(format: "\\u%04x", scalar.value)
                } else {
                    output.unicodeScalars.append(scalar)
                }
            }
        }
    }

    private static func appendQuoted(_ text: String, to output: inout String) {
        output += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case _ where TerminalText.needsEscape(scalar):
                // Controls must be escaped (RFC 8259 §7); DEL, C1 controls and bidirectional overrides are too, so
                // that JSON printed on a terminal cannot carry terminal control sequences either.
                output += String(format: "\\u%04x", scalar.value)
            default:
                output.unicodeScalars.append(scalar)
            }
        }
        output += "\""
    }
}
