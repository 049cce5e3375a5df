/// One HTTP header line: a name and a value, kept exactly as given.
///
/// Used for extra response headers, scripted responses and recorded request headers.
public struct HeaderField: Sendable, Hashable, CustomStringConvertible {
    /// The header name, e.g. `"Content-Type"`.
    public var name: String
    /// The header value, without surrounding whitespace.
    public var value: String

    /// Creates a header field.
    ///
    /// - Parameters:
    ///   - name: The header name.
    ///   - value: The header value.
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// Creates a header field from an unlabeled name and value.
    ///
    /// - Parameters:
    ///   - name: The header name.
    ///   - value: The header value.
    public init(_ name: String, _ value: String) {
        self.init(name: name, value: value)
    }

    /// The header as it appears on the wire, without the line terminator: `Name: value`.
    public var description: String { "\(name): \(value)" }
}

extension [HeaderField] {
    /// The first value of the header called `name`, compared case-insensitively.
    func firstValue(named name: String) -> String? {
        first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// Whether a header called `name` (case-insensitive) is present.
    func contains(named name: String) -> Bool {
        firstValue(named: name) != nil
    }
}
