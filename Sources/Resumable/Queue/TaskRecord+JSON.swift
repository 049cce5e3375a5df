import Foundation

/// A task record's JSON written directly: the bytes `JSONEncoder` with `.sortedKeys` makes of it
/// (`TaskRecordJSONTests` compares the two), at a fraction of the cost. Every download writes two records, and
/// `JSONEncoder`, which builds a tree of boxed values and sorts every object's keys, was half of their cost.
///
/// A token with request headers (an object of any keys) goes through `JSONEncoder`.
extension TaskRecord {
    /// The record's JSON, as ``TaskStore`` writes it.
    func encodedJSON() throws -> Data {
        guard token?.headers.isEmpty ?? true else {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            return try encoder.encode(self)
        }
        var text = JSONText()
        text.bytes.reserveCapacity(token == nil ? 320 : 1_024)
        // Keys in the order `.sortedKeys` gives them (ascending by UTF-8 bytes).
        text.open()
        if let bytesPerSecond { text.field("bytesPerSecond", integer: bytesPerSecond) }
        if let checkpointedAt { text.field("checkpointedAt", string: ISO8601.format(checkpointedAt)) }
        text.field("destination", string: destination.tokenValue)
        if let expectedSHA256 { text.field("expectedSHA256", string: expectedSHA256) }
        if let failure { text.field("failure", string: failure) }
        text.field("id", string: id.description)
        text.field("order", integer: order)
        text.field("priority", integer: Int64(priority))
        text.field("state", string: state.rawValue)
        if let token {
            text.key("token")
            token.write(to: &text)
        }
        text.field("url", string: url.absoluteString)
        text.field("version", integer: Int64(Self.currentVersion))
        text.close()
        return Data(text.bytes)
    }
}

extension ResumeToken {
    /// The token as `JSONEncoder` with `.sortedKeys` writes it (compact, `/` escaped); its headers must be empty.
    fileprivate func write(to text: inout JSONText) {
        text.open()
        text.field("acceptRanges", optionalString: acceptRanges)
        text.field("createdAt", string: ISO8601.format(createdAt))
        text.field("destination", optionalString: destination)
        text.field("etag", optionalString: etag)
        text.field("expectedLength", optionalInteger: expectedLength)
        text.field("expectedSHA256", optionalString: expectedSHA256)
        if let finalName { text.field("finalName", string: finalName) }
        text.key("headers")
        text.bytes += [UInt8(ascii: "{"), UInt8(ascii: "}")]
        text.field("lastModified", optionalString: lastModified)
        text.field("offset", integer: offset)
        text.field("originalURL", string: originalURL.absoluteString)
        if !completedRanges.isEmpty {
            text.key("ranges")
            text.bytes.append(UInt8(ascii: "["))
            for (index, range) in completedRanges.enumerated() {
                if index > 0 { text.bytes.append(UInt8(ascii: ",")) }
                text.open()
                text.field("end", integer: range.upperBound)
                text.field("start", integer: range.lowerBound)
                text.close()
            }
            text.bytes.append(UInt8(ascii: "]"))
        }
        text.field("responseDate", optionalString: responseDate)
        text.field("suggestedFilename", string: suggestedFilename)
        text.field("tempPath", string: tempPath)
        text.field("updatedAt", string: ISO8601.format(updatedAt))
        text.field("url", string: url.absoluteString)
        text.field("version", integer: Int64(version))
        text.close()
    }
}

/// Compact JSON, escaped as `JSONEncoder` escapes strings without `.withoutEscapingSlashes`.
struct JSONText {
    var bytes: [UInt8] = []
    /// Whether the object being written has no member yet.
    private var first = true

    mutating func open() {
        bytes.append(UInt8(ascii: "{"))
        first = true
    }

    mutating func close() {
        bytes.append(UInt8(ascii: "}"))
        first = false
    }

    mutating func key(_ name: StaticString) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        bytes.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    mutating func field(_ name: StaticString, string value: String) {
        key(name)
        string(value)
    }

    mutating func field(_ name: StaticString, integer value: Int64) {
        key(name)
        integer(value)
    }

    mutating func field(_ name: StaticString, optionalString value: String?) {
        key(name)
        if let value { string(value) } else { null() }
    }

    mutating func field(_ name: StaticString, optionalInteger value: Int64?) {
        key(name)
        if let value { integer(value) } else { null() }
    }

    mutating func integer(_ value: Int64) {
        bytes.append(contentsOf: String(value).utf8)
    }

    mutating func null() {
        bytes.append(contentsOf: [UInt8(ascii: "n"), UInt8(ascii: "u"), UInt8(ascii: "l"), UInt8(ascii: "l")])
    }

    mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case UInt8(ascii: "/"): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "/")]
            case 0x08: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "b")]
            case 0x0C: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "f")]
            case 0x0A: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0x0D: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            case 0x09: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case 0x00..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes += [
                    UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)],
                    hex[Int(byte & 0x0F)],
                ]
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
