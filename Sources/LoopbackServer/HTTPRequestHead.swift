/// A parsed HTTP/1.x request head.
struct HTTPRequestHead: Sendable {
    /// Why a request head was rejected, with the status to answer.
    struct ParseError: Error, Equatable {
        /// The status code to answer (400, 431 or 505).
        var status: Int
        /// A short reason, for debugging.
        var reason: String
    }

    /// The largest request head accepted (request line plus headers).
    static let maxHeadSize = 64 * 1024

    var method: String
    var target: String
    var version: String
    var headers: [HeaderField]

    /// The path part of the target (origin-form or absolute-form), without query or fragment.
    var path: String {
        Self.splitTarget(target).path
    }

    /// The query part of the target, without the `?`.
    var query: String? {
        Self.splitTarget(target).query
    }

    /// The first value of a header, compared case-insensitively.
    func header(_ name: String) -> String? {
        headers.firstValue(named: name)
    }

    /// The first byte of the request's `Range` when it holds a single `bytes=first-last` or `bytes=first-` range;
    /// `nil` for no, several, suffix or invalid ranges.
    var singleRangeStart: Int64? {
        ByteRangeSpec.singleStart(of: header("Range"))
    }

    /// The request as recorded for tests.
    var recorded: RecordedRequest {
        let parts = Self.splitTarget(target)
        return RecordedRequest(
            method: method, target: target, path: parts.path, query: parts.query, version: version, headers: headers)
    }

    /// Splits a request-target into path and query; absolute-form targets lose their scheme and authority.
    static func splitTarget(_ target: String) -> (path: String, query: String?) {
        var rest = Substring(target)
        if let fragment = rest.firstIndex(of: "#") { rest = rest[..<fragment] }
        if !rest.hasPrefix("/"), let schemeEnd = rest.range(of: "://") {
            let afterAuthority = rest[schemeEnd.upperBound...]
            if let slash = afterAuthority.firstIndex(where: { $0 == "/" || $0 == "?" }) {
                rest = afterAuthority[slash...]
            } else {
                rest = "/"
            }
            if rest.hasPrefix("?") { rest = "/" + rest }
        }
        guard let question = rest.firstIndex(of: "?") else { return (String(rest), nil) }
        return (String(rest[..<question]), String(rest[rest.index(after: question)...]))
    }

    /// Finds the end of the head in `buffer`: returns the index just past the empty line, or `nil` if incomplete.
    ///
    /// Accepts CRLF and bare LF line endings; leading empty lines are not treated as the end.
    static func headEnd(in buffer: [UInt8]) -> Int? {
        var index = 0
        // Skip leading empty lines (RFC 9112 §2.2).
        while index < buffer.count, buffer[index] == 0x0D || buffer[index] == 0x0A { index += 1 }
        var lineStart = index
        while index < buffer.count {
            if buffer[index] == 0x0A {
                let lineLength = index - lineStart
                if lineLength == 0 || (lineLength == 1 && buffer[lineStart] == 0x0D) {
                    return index + 1
                }
                lineStart = index + 1
            }
            index += 1
        }
        return nil
    }

    /// Parses a complete head (as delimited by ``headEnd(in:)``).
    static func parse(_ head: ArraySlice<UInt8>) throws(ParseError) -> HTTPRequestHead {
        var lines: [ArraySlice<UInt8>] = head.split(separator: 0x0A, omittingEmptySubsequences: false).map {
            $0.last == 0x0D ? $0.dropLast() : $0
        }
        while let first = lines.first, first.isEmpty { lines.removeFirst() }
        while let last = lines.last, last.isEmpty { lines.removeLast() }
        guard let requestLine = lines.first else { throw ParseError(status: 400, reason: "empty request") }
        let parts = requestLine.split(separator: 0x20, omittingEmptySubsequences: false)
        guard parts.count == 3, parts.allSatisfy({ !$0.isEmpty }) else {
            throw ParseError(status: 400, reason: "malformed request line")
        }
        guard parts[0].allSatisfy(isTokenCharacter) else { throw ParseError(status: 400, reason: "bad method") }
        guard parts[1].allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw ParseError(status: 400, reason: "bad request-target")
        }
        let version = Array(parts[2])
        guard version.count == 8, version.starts(with: Array("HTTP/".utf8)),
            isDigit(version[5]), version[6] == UInt8(ascii: "."), isDigit(version[7])
        else { throw ParseError(status: 400, reason: "bad version") }
        guard version[5] == UInt8(ascii: "1") else { throw ParseError(status: 505, reason: "unsupported version") }

        var headers: [HeaderField] = []
        for line in lines.dropFirst() {
            guard let first = line.first, first != 0x20, first != 0x09 else {
                throw ParseError(status: 400, reason: "obsolete line folding or empty header line")
            }
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex else {
                throw ParseError(status: 400, reason: "header without name or colon")
            }
            let name = line[line.startIndex..<colon]
            guard name.allSatisfy(isTokenCharacter) else { throw ParseError(status: 400, reason: "bad header name") }
            var value = line[(colon + 1)...]
            while let head = value.first, head == 0x20 || head == 0x09 { value = value.dropFirst() }
            while let tail = value.last, tail == 0x20 || tail == 0x09 { value = value.dropLast() }
            guard !value.contains(where: { $0 == 0x00 || $0 == 0x0D }) else {
                throw ParseError(status: 400, reason: "bad header value")
            }
            headers.append(HeaderField(name: latin1(name), value: latin1(value)))
        }
        return HTTPRequestHead(
            method: latin1(parts[0]), target: latin1(parts[1]), version: latin1(parts[2]), headers: headers)
    }

    /// Decodes bytes as ISO-8859-1, which never fails (each byte becomes one scalar).
    static func latin1(_ bytes: ArraySlice<UInt8>) -> String {
        if bytes.allSatisfy({ $0 < 0x80 }) {
            return String(decoding: bytes, as: UTF8.self)
        }
        var scalars = String.UnicodeScalarView()
        scalars.append(contentsOf: bytes.map { Unicode.Scalar($0) })
        return String(scalars)
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    /// RFC 9110 `tchar`.
    private static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        default:
            Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }
}
