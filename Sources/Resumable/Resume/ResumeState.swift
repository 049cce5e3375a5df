import Foundation

/// Everything a download must remember to continue: the one owner of the resume state.
///
/// A ``ResumeToken`` is this value's stored form and nothing else: a token is made only by
/// ``token(updatedAt:)`` and read only by ``init(token:destination:tempPath:bytesOnDisk:replacingURL:headers:sensitiveHeaderNames:)``.
/// The ``ResumeStateMachine`` is the only code that changes it.
struct ResumeState: Hashable, Sendable {
    /// The URL the next request goes to (after redirects).
    var url: URL
    /// The URL the download was started with; credentials are sent to its origin only.
    var originalURL: URL
    /// How many bytes at the start of ``tempPath`` belong to the representation ``validators`` describe.
    var offset: Int64
    /// Byte ranges beyond ``offset`` that are in ``tempPath`` too (a multi-connection download's finished
    /// segments); none touches the first ``offset`` bytes (``absorbCompletedRanges()`` merges those).
    var completedRanges = ByteRangeSet()
    /// The size of the whole representation, when known.
    var expectedLength: Int64?
    /// The validators the bytes on disk were received under.
    var validators: Validators
    /// The last `Accept-Ranges` received.
    var acceptRanges: String?
    /// The sanitized name for a destination that is a directory.
    var suggestedFilename: String
    /// Whether a response already named the file (later ones need not repeat it).
    var hasNameFromResponse: Bool
    /// Every request header the caller asked for, merged and validated (credentials included: they are
    /// filtered when a token is made and when a request crosses origins).
    var headers: [HTTPHeader]
    /// Header names the caller marked as credentials, lowercased, beyond the built-in rule.
    var sensitiveHeaderNames: Set<String>
    /// Where the finished file goes.
    var destination: DownloadTask.Destination
    /// The temporary file holding the first ``offset`` bytes.
    var tempPath: String
    /// When the download started.
    var createdAt: Date
    /// The SHA-256 the finished file must have, lowercase hex; kept in the token so a resume still verifies.
    var expectedSHA256: String?

    /// The state of a new download.
    init(
        url: URL,
        headers: [HTTPHeader],
        sensitiveHeaderNames: Set<String>,
        destination: DownloadTask.Destination,
        tempPath: String,
        createdAt: Date,
        expectedSHA256: String? = nil
    ) {
        self.url = url
        self.originalURL = url
        self.offset = 0
        self.expectedLength = nil
        self.validators = Validators()
        self.acceptRanges = nil
        self.suggestedFilename = SuggestedFilename.choose(contentDisposition: nil, url: url)
        self.hasNameFromResponse = false
        self.headers = headers
        self.sensitiveHeaderNames = Set(sensitiveHeaderNames.map { $0.lowercased() })
        self.destination = destination
        self.tempPath = tempPath
        self.createdAt = createdAt
        self.expectedSHA256 = expectedSHA256
    }

    /// The state a token describes, continued in `tempPath`, which holds `bytesOnDisk` bytes.
    ///
    /// The offset is the smaller of the token's and the file's: a lost tail is downloaded again, and bytes
    /// beyond the token's offset are not trusted (they are cut off before the next request).
    init(
        token: ResumeToken,
        destination: DownloadTask.Destination,
        tempPath: String,
        bytesOnDisk: Int64,
        replacingURL: URL?,
        headers: [HTTPHeader],
        sensitiveHeaderNames: Set<String>,
        expectedSHA256: String? = nil
    ) {
        self.url = replacingURL ?? token.url
        self.originalURL = replacingURL ?? token.originalURL
        if tempPath == token.tempPath {
            let kept = token.kept(inFileOf: bytesOnDisk)
            self.offset = kept.offset
            self.completedRanges = kept.ranges
        } else {
            self.offset = 0
        }
        self.expectedLength = token.expectedLength
        self.validators = Validators(
            etag: token.etag, lastModified: token.lastModified, responseDate: token.responseDate)
        self.acceptRanges = token.acceptRanges
        self.suggestedFilename = token.suggestedFilename
        self.hasNameFromResponse = true
        self.headers = headers
        self.sensitiveHeaderNames = Set(sensitiveHeaderNames.map { $0.lowercased() })
        self.destination = destination
        self.tempPath = tempPath
        self.createdAt = token.createdAt
        self.expectedSHA256 = expectedSHA256
        absorbCompletedRanges()
    }

    /// Every byte known to be in ``tempPath``: the prefix and the completed ranges.
    var bytesPresent: ByteRangeSet {
        var present = completedRanges
        present.insert(0..<offset)
        return present
    }

    /// How many bytes are in ``tempPath``: the prefix and the completed ranges.
    var bytesOnDisk: Int64 { offset + completedRanges.count }

    /// The bytes not yet in ``tempPath``, when the length is known.
    var missingLength: Int64? { expectedLength.map { max($0 - bytesOnDisk, 0) } }

    /// How many bytes a request from here asks for: up to the first completed range (a multi-connection download's
    /// first gap), else to the expected end; `nil` when the length is unknown.
    var askedLength: Int64? {
        if let next = completedRanges.ranges.first { return max(next.lowerBound - offset, 0) }
        return expectedLength.map { max($0 - offset, 0) }
    }

    /// Extends the prefix over completed ranges it reached.
    mutating func absorbCompletedRanges() {
        guard !completedRanges.isEmpty else { return }
        let present = bytesPresent
        offset = present.prefixLength
        completedRanges = ByteRangeSet(present.rangesAfterPrefix)
    }

    /// Sets the bytes in ``tempPath`` to `present`: the prefix and the ranges beyond it.
    mutating func setBytesPresent(_ present: ByteRangeSet) {
        offset = present.prefixLength
        completedRanges = ByteRangeSet(present.rangesAfterPrefix)
    }

    /// Whether `name` carries credentials: never stored in a token, never sent to another origin.
    func isSensitive(_ name: String) -> Bool {
        SensitiveHeaders.contains(name) || sensitiveHeaderNames.contains(name.lowercased())
    }

    /// The token for this state.
    /// `finalName`: the free name the finished file is about to be moved to (``ResumeToken/finalName``).
    func token(updatedAt: Date = Date(), finalName: String? = nil) -> ResumeToken {
        var stored: [String: String] = [:]
        for header in headers where !isSensitive(header.name) {
            stored[header.name] = header.value
        }
        return ResumeToken(
            url: url,
            originalURL: originalURL,
            offset: offset,
            completedRanges: Self.listable(completedRanges.ranges),
            expectedLength: expectedLength,
            etag: validators.etag,
            lastModified: validators.lastModified,
            responseDate: validators.responseDate,
            acceptRanges: acceptRanges,
            tempPath: tempPath,
            suggestedFilename: suggestedFilename,
            destination: destination.tokenValue,
            finalName: finalName,
            headers: stored,
            expectedSHA256: expectedSHA256,
            createdAt: createdAt,
            updatedAt: updatedAt
        )
    }
}

extension ResumeState {
    /// At most ``ResumeToken/maximumRangeCount`` of `ranges`, the longest ones, in file order: a token lists fewer
    /// bytes than the file holds (those of a dropped range are asked again) rather than more ranges than a reader
    /// takes. A resume of a token with many ranges adds a range per connection it starts; a crash must not leave a
    /// token that cannot be read.
    static func listable(_ ranges: [Range<Int64>]) -> [Range<Int64>] {
        guard ranges.count > ResumeToken.maximumRangeCount else { return ranges }
        let longest = ranges.indices.sorted {
            (ranges[$0].upperBound - ranges[$0].lowerBound, $1) > (ranges[$1].upperBound - ranges[$1].lowerBound, $0)
        }
        return longest.prefix(ResumeToken.maximumRangeCount).sorted().map { ranges[$0] }
    }
}

extension ResumeToken {
    /// What a resume keeps of this token's temporary file when the file is `size` bytes long: the prefix, never
    /// beyond the file, and the listed ranges the file still holds (the rest is asked again). The one rule for
    /// ``ResumeState`` and for ``Reconciliation/inspect(_:)``.
    func kept(inFileOf size: Int64) -> (offset: Int64, ranges: ByteRangeSet) {
        var ranges = ByteRangeSet(completedRanges)
        ranges.clip(to: size)
        return (min(offset, size), ranges)
    }

    /// Where the bytes this token lists end: the end of its last range, or its offset. A resume cuts a longer
    /// temporary file there before it asks for more.
    var listedEnd: Int64 { completedRanges.last?.upperBound ?? offset }
}
