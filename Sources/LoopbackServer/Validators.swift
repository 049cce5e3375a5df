/// Request-header evaluations: `If-Range` and `Accept-Encoding`.
enum Validators {
    /// Whether an `If-Range` value matches the representation (RFC 9110 §13.1.5).
    ///
    /// An entity tag matches only a strong, byte-identical ETag (weak tags never match); anything else is taken
    /// as an HTTP date and matches only when it equals the Last-Modified string exactly.
    static func ifRangeMatches(_ value: String, etag: String?, lastModified: String?) -> Bool {
        let trimmed = trimOWS(value)
        if trimmed.hasPrefix("W/") { return false }
        if trimmed.hasPrefix("\"") {
            guard let etag, !etag.hasPrefix("W/") else { return false }
            return trimmed == etag
        }
        guard let lastModified else { return false }
        return trimmed == lastModified
    }

    /// Whether an `Accept-Encoding` value allows gzip (`gzip`, `x-gzip` or `*` with a non-zero q-value).
    static func acceptsGzip(_ value: String?) -> Bool {
        guard let value else { return false }
        var gzipQuality: Double?
        var wildcardQuality: Double?
        for element in value.split(separator: ",") {
            let parameters = element.split(separator: ";").map { trimOWS(String($0)) }
            guard let coding = parameters.first?.lowercased(), !coding.isEmpty else { continue }
            var quality = 1.0
            for parameter in parameters.dropFirst() {
                let pair = parameter.split(separator: "=", maxSplits: 1).map { trimOWS(String($0)) }
                if pair.count == 2, pair[0].lowercased() == "q" {
                    quality = Double(pair[1]) ?? 0
                }
            }
            switch coding {
            case "gzip", "x-gzip": gzipQuality = max(gzipQuality ?? 0, quality)
            case "*": wildcardQuality = quality
            default: break
            }
        }
        if let gzipQuality { return gzipQuality > 0 }
        return (wildcardQuality ?? 0) > 0
    }

    private static func trimOWS(_ text: String) -> String {
        var scalars = Substring(text)
        while let first = scalars.first, first == " " || first == "\t" { scalars = scalars.dropFirst() }
        while let last = scalars.last, last == " " || last == "\t" { scalars = scalars.dropLast() }
        return String(scalars)
    }
}
