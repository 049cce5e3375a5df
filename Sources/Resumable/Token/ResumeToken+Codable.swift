import Foundation

extension ResumeToken: Codable {
    enum CodingKeys: String, CodingKey, CaseIterable {
        case version, url, originalURL, offset, expectedLength, etag, lastModified, responseDate, acceptRanges
        case tempPath, suggestedFilename, destination, headers, expectedSHA256, createdAt, updatedAt
        /// Only in a last token whose file is moved to a free name (``ResumeToken/finalName``).
        case finalName
        /// Version 2: the byte ranges beyond `offset` already in the file (``ResumeToken/completedRanges``).
        case ranges
    }

    private enum RangeKeys: String, CodingKey {
        case start, end
    }

    /// The most ranges a token may list; a download with 16 connections leaves at most a few dozen.
    static let maximumRangeCount = 4096

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let version = try container.decode(Int.self, forKey: .version)
        if version > Self.currentVersion {
            throw ResumableError(
                .newerTokenVersion,
                "resume token field 'version' is \(version), but this version of Resumable reads versions 1 to "
                    + "\(Self.currentVersion) only; resume it with a newer Resumable"
            )
        }
        guard version == 1 || version == 2 else {
            throw ResumableError.invalidToken(field: "version", "must be 1 or 2, found \(version)")
        }
        if version == 1 && container.contains(.ranges) {
            throw ResumableError.invalidToken(field: "ranges", "is not part of a version 1 token")
        }
        self.version = version
        self.url = try Self.decodeHTTPURL(container, .url)
        self.originalURL = try Self.decodeHTTPURL(container, .originalURL)

        let offset = try Self.decodeInteger(container, .offset)
        guard offset >= 0 else { throw ResumableError.invalidToken(field: "offset", "is negative (\(offset))") }
        self.offset = offset
        let expectedLength =
            try !container.contains(.expectedLength) || container.decodeNil(forKey: .expectedLength)
            ? nil : Self.decodeInteger(container, .expectedLength)
        if let expectedLength {
            guard expectedLength >= 0 else {
                throw ResumableError.invalidToken(field: "expectedLength", "is negative (\(expectedLength))")
            }
            guard offset <= expectedLength else {
                throw ResumableError.invalidToken(
                    field: "offset",
                    "(\(offset)) is beyond expectedLength (\(expectedLength))"
                )
            }
        }
        self.expectedLength = expectedLength
        self.completedRanges =
            version == 2
            ? try Self.decodeRanges(container, offset: offset, expectedLength: expectedLength) : []

        let etag = try Self.decodeHeaderValue(container, .etag)
        if let etag, EntityTag(etag) == nil {
            throw ResumableError.invalidToken(field: "etag", "is not an entity tag: \(etag.debugDescription)")
        }
        self.etag = etag
        self.lastModified = try Self.decodeHeaderValue(container, .lastModified)
        if version == 2 && etag == nil && lastModified == nil {
            throw ResumableError.invalidToken(
                field: "ranges", "needs a validator (etag or lastModified): without one, no range can be joined")
        }
        self.responseDate = try Self.decodeHeaderValue(container, .responseDate)
        self.acceptRanges = try Self.decodeHeaderValue(container, .acceptRanges)

        let tempPath = try container.decode(String.self, forKey: .tempPath)
        guard tempPath.hasPrefix("/") else {
            throw ResumableError.invalidToken(
                field: "tempPath", "is not an absolute path: \(tempPath.debugDescription)")
        }
        guard !tempPath.contains("\0"), !tempPath.split(separator: "/").contains("..") else {
            throw ResumableError.invalidToken(field: "tempPath", "contains '..' or NUL: \(tempPath.debugDescription)")
        }
        guard TemporaryFileName.isValid((tempPath as NSString).lastPathComponent) else {
            throw ResumableError.invalidToken(
                field: "tempPath",
                "does not name a Resumable temporary file: \(tempPath.debugDescription)"
            )
        }
        self.tempPath = tempPath

        let suggestedFilename = try container.decode(String.self, forKey: .suggestedFilename)
        guard SuggestedFilename.sanitize(suggestedFilename) == suggestedFilename else {
            throw ResumableError.invalidToken(
                field: "suggestedFilename",
                "is not a safe file name: \(suggestedFilename.debugDescription)"
            )
        }
        self.suggestedFilename = suggestedFilename

        let destination = try container.decodeIfPresent(String.self, forKey: .destination)
        if let destination {
            guard destination.hasPrefix("/") else {
                throw ResumableError.invalidToken(
                    field: "destination",
                    "is not an absolute path: \(destination.debugDescription)"
                )
            }
            // Any other byte is a legal file name on Linux, control characters included: the destination is the
            // user's own choice, written back as it was given (`tempPath` follows the same rule). Printing it is the
            // printer's business (the CLI escapes what it shows).
            guard !destination.split(separator: "/").contains(".."), !destination.utf8.contains(0) else {
                throw ResumableError.invalidToken(
                    field: "destination", "contains '..' or NUL: \(destination.debugDescription)")
            }
        }
        self.destination = destination
        let finalName = try container.decodeIfPresent(String.self, forKey: .finalName)
        if let finalName {
            // A name in the destination's directory, nothing more: no separator, not `.` or `..`, no NUL. Not
            // `SuggestedFilename`'s rules: the free name numbers the caller's own file name (`.env (1)`), which
            // a server's name would never be.
            // And never a name this library gives its temporary files: the finished file is never one of them.
            guard !finalName.isEmpty, finalName != ".", finalName != "..", !finalName.utf8.contains(UInt8(ascii: "/")),
                !finalName.utf8.contains(0), !TemporaryFileName.isValid(finalName)
            else {
                throw ResumableError.invalidToken(
                    field: "finalName", "is not a plain file name: \(finalName.debugDescription)")
            }
            guard let expectedLength, offset == expectedLength else {
                throw ResumableError.invalidToken(
                    field: "finalName", "belongs only to a token of a complete file (offset equal to expectedLength)")
            }
        }
        self.finalName = finalName

        let headers = try container.decodeIfPresent([String: String].self, forKey: .headers) ?? [:]
        for (name, value) in headers {
            guard HTTPFieldSyntax.isValidName(name), HTTPFieldSyntax.isValidValue(value) else {
                throw ResumableError.invalidToken(field: "headers", "holds an invalid header \(name.debugDescription)")
            }
            guard !SensitiveHeaders.contains(name) else {
                throw ResumableError.invalidToken(
                    field: "headers", "must never hold \(name), a credential header (see docs/resume-token.md)")
            }
        }
        self.headers = headers
        let expectedSHA256 = try container.decodeIfPresent(String.self, forKey: .expectedSHA256)
        if let expectedSHA256, !SHA256Digest.isLowercaseHex(expectedSHA256) {
            throw ResumableError.invalidToken(
                field: "expectedSHA256", "is not 64 lowercase hexadecimal digits: \(expectedSHA256.debugDescription)")
        }
        self.expectedSHA256 = expectedSHA256
        self.createdAt = try Self.decodeDate(container, .createdAt)
        self.updatedAt = try Self.decodeDate(container, .updatedAt)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(version, forKey: .version)
        try container.encode(url.absoluteString, forKey: .url)
        try container.encode(originalURL.absoluteString, forKey: .originalURL)
        try container.encode(offset, forKey: .offset)
        if !completedRanges.isEmpty {
            var list = container.nestedUnkeyedContainer(forKey: .ranges)
            for range in completedRanges {
                var pair = list.nestedContainer(keyedBy: RangeKeys.self)
                try pair.encode(range.lowerBound, forKey: .start)
                try pair.encode(range.upperBound, forKey: .end)
            }
        }
        try container.encode(expectedLength, forKey: .expectedLength)
        try container.encode(etag, forKey: .etag)
        try container.encode(lastModified, forKey: .lastModified)
        try container.encode(responseDate, forKey: .responseDate)
        try container.encode(acceptRanges, forKey: .acceptRanges)
        try container.encode(tempPath, forKey: .tempPath)
        try container.encode(suggestedFilename, forKey: .suggestedFilename)
        try container.encode(destination, forKey: .destination)
        try container.encodeIfPresent(finalName, forKey: .finalName)
        try container.encode(headers, forKey: .headers)
        try container.encode(expectedSHA256, forKey: .expectedSHA256)
        try container.encode(ISO8601.format(createdAt), forKey: .createdAt)
        try container.encode(ISO8601.format(updatedAt), forKey: .updatedAt)
    }

    /// The `ranges` of a version 2 token: a non-empty list of `{"start": a, "end": b}`, `offset < a < b`, sorted,
    /// neither overlapping nor touching, all within `expectedLength`, which is required.
    private static func decodeRanges(
        _ container: KeyedDecodingContainer<CodingKeys>, offset: Int64, expectedLength: Int64?
    ) throws -> [Range<Int64>] {
        guard container.contains(.ranges) else {
            throw ResumableError.invalidToken(field: "ranges", "is missing (a version 2 token lists its ranges)")
        }
        guard let expectedLength else {
            throw ResumableError.invalidToken(field: "expectedLength", "is required with ranges")
        }
        var list: UnkeyedDecodingContainer
        do {
            list = try container.nestedUnkeyedContainer(forKey: .ranges)
        } catch {
            throw ResumableError.invalidToken(field: "ranges", "is not a list")
        }
        var ranges: [Range<Int64>] = []
        var previousEnd = offset
        while !list.isAtEnd {
            guard ranges.count < maximumRangeCount else {
                throw ResumableError.invalidToken(field: "ranges", "lists more than \(maximumRangeCount) ranges")
            }
            let pair: KeyedDecodingContainer<RangeKeys>
            let start: Int64
            let end: Int64
            do {
                pair = try list.nestedContainer(keyedBy: RangeKeys.self)
                start = try pair.decode(Int64.self, forKey: .start)
                end = try pair.decode(Int64.self, forKey: .end)
            } catch {
                throw ResumableError.invalidToken(
                    field: "ranges", "entry \(ranges.count) is not {\"start\": integer, \"end\": integer}")
            }
            guard start > previousEnd, start < end, end <= expectedLength else {
                throw ResumableError.invalidToken(
                    field: "ranges",
                    "entry \(ranges.count) (\(start)..<\(end)) must start after offset and the previous range "
                        + "(\(previousEnd)), be non-empty and end within expectedLength (\(expectedLength))"
                )
            }
            ranges.append(start..<end)
            previousEnd = end
        }
        guard !ranges.isEmpty else {
            throw ResumableError.invalidToken(field: "ranges", "is empty (a version 2 token lists at least one range)")
        }
        return ranges
    }

    private static func decodeHTTPURL(_ container: KeyedDecodingContainer<CodingKeys>, _ key: CodingKeys) throws -> URL
    {
        let string = try container.decode(String.self, forKey: key)
        // Checked on the text first, so that the error never repeats the credential.
        if HTTPURL.userInfoRange(in: string) != nil || URL(string: string).map(HTTPURL.hasUserInfo) == true {
            throw ResumableError.invalidToken(
                field: key.rawValue, "holds a user name or password ('user:password@'), which a token never stores")
        }
        guard let url = URL(string: string) else {
            throw ResumableError.invalidToken(
                field: key.rawValue, "is not an http or https URL: \(HTTPURL.excerpt(string).debugDescription)")
        }
        if let problem = HTTPURL.problem(with: url) {
            throw ResumableError.invalidToken(
                field: key.rawValue, "is \(problem): \(HTTPURL.excerpt(string).debugDescription)")
        }
        return url
    }

    private static func decodeInteger(_ container: KeyedDecodingContainer<CodingKeys>, _ key: CodingKeys) throws
        -> Int64
    {
        guard container.contains(key) else { throw ResumableError.invalidToken(field: key.rawValue, "is missing") }
        do {
            return try container.decode(Int64.self, forKey: key)
        } catch {
            throw ResumableError.invalidToken(field: key.rawValue, "is not a 64-bit integer")
        }
    }

    private static func decodeHeaderValue(
        _ container: KeyedDecodingContainer<CodingKeys>,
        _ key: CodingKeys
    ) throws -> String? {
        guard let value = try container.decodeIfPresent(String.self, forKey: key) else { return nil }
        guard HTTPFieldSyntax.isValidValue(value) else {
            throw ResumableError.invalidToken(field: key.rawValue, "holds characters a header cannot carry")
        }
        return value
    }

    private static func decodeDate(_ container: KeyedDecodingContainer<CodingKeys>, _ key: CodingKeys) throws -> Date {
        let string = try container.decode(String.self, forKey: key)
        guard let date = ISO8601.parse(string) else {
            throw ResumableError.invalidToken(
                field: key.rawValue, "is not an ISO 8601 date: \(string.debugDescription)")
        }
        return date
    }
}
