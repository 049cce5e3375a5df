import Foundation

/// Everything needed to continue an interrupted download, in this process or another.
///
/// A token is what ``DownloadTask/cancelProducingResumeData()`` returns and what a transient
/// ``ResumableError`` carries. It is `Codable`: its JSON form is a stable, versioned contract documented
/// in `docs/resume-token.md`, so it can be written to disk and handed to another process, which passes
/// it to ``DownloadTask/resume(from:destination:replacingURL:configuration:)``.
///
/// A token is data from outside: decoding validates every field and rejects anything this library
/// would not have written, with a ``ResumableError`` of code ``ResumableError/Code/invalidToken`` that
/// names the field.
public struct ResumeToken: Sendable, Hashable {
    /// The newest version of the JSON format this library reads and writes.
    ///
    /// A token is written as version 1 unless it needs version 2: when bytes beyond ``offset`` are already in the
    /// temporary file (``completedRanges``, from a multi-connection download). So a token that a single connection
    /// left behind stays readable by every earlier release.
    public static let currentVersion = 2

    /// The format version of this token.
    public let version: Int
    /// The URL to resume from: the final URL of the last request, after redirects.
    ///
    /// Never holds a user name or password (`user:password@`): they are removed when a token is made, and a
    /// decoded token that has them is rejected.
    public let url: URL
    /// The URL the download was started with, without user name or password, like ``url``.
    public let originalURL: URL
    /// How many bytes at the start of the temporary file are safely there; the resume asks for `bytes=offset-`.
    public let offset: Int64
    /// Byte ranges beyond ``offset`` that are safely in the temporary file too, sorted, disjoint and not touching
    /// each other or the first ``offset`` bytes; `end` is exclusive. Left by a multi-connection download
    /// (``DownloadTask/Configuration/connections``); empty in a version 1 token. A resume downloads only the gaps.
    public let completedRanges: [Range<Int64>]
    /// The size of the whole representation, when the server announced it.
    public let expectedLength: Int64?
    /// The `ETag` of the representation, exactly as received (quotes and `W/` included).
    public let etag: String?
    /// The `Last-Modified` of the representation, exactly as received.
    public let lastModified: String?
    /// The `Date` of the response that carried the validators, exactly as received.
    ///
    /// It tells whether ``lastModified`` is a strong validator (RFC 9110 §8.8.2.2).
    public let responseDate: String?
    /// The `Accept-Ranges` of the last response, exactly as received; `none` advises against resuming.
    public let acceptRanges: String?
    /// The absolute path of the temporary file holding the first ``offset`` bytes.
    public let tempPath: String
    /// The sanitized name the finished file gets when the destination is a directory.
    public let suggestedFilename: String
    /// Where the finished file goes, as chosen when the download started.
    ///
    /// A path ending in `/` is a directory (the file gets ``suggestedFilename`` there); any other path is
    /// the exact file. `nil` means the directory that holds ``tempPath``.
    public let destination: String?
    /// The name the finished file is being given in the destination's directory, when it is not the one the
    /// destination names: a free name such as `name (1).ext`, because `name.ext` was taken. Only in the last token,
    /// the one written just before the finished file is moved into place; `nil` otherwise. A resume of that token
    /// after a crash looks for the finished file under this name.
    public let finalName: String?
    /// Request headers that were safe to store and are sent again on resume.
    ///
    /// Credential headers are never stored: `Authorization`, `Cookie`, `Proxy-Authorization`, any name containing
    /// `auth`, `cookie`, `credential`, `csrf`, `jwt`, `key`, `passphrase`, `passwd`, `password`, `secret`,
    /// `session`, `signature`, `token` or `xsrf` (case-insensitive; `X-Api-Key`, `X-Amz-Security-Token`, …),
    /// `DPoP`, and the names in ``DownloadTask/Configuration/sensitiveHeaderNames``.
    public let headers: [String: String]
    /// The SHA-256 the finished file must have (64 lowercase hex digits), when the download was started with one
    /// (``DownloadTask/Configuration/expectedSHA256``): a resumed download still verifies it.
    public let expectedSHA256: String?
    /// When the download started.
    public let createdAt: Date
    /// When this token was produced.
    public let updatedAt: Date

    init(
        url: URL,
        originalURL: URL,
        offset: Int64,
        completedRanges: [Range<Int64>] = [],
        expectedLength: Int64?,
        etag: String?,
        lastModified: String?,
        responseDate: String?,
        acceptRanges: String?,
        tempPath: String,
        suggestedFilename: String,
        destination: String?,
        finalName: String? = nil,
        headers: [String: String],
        extraSensitive: Set<String> = [],
        expectedSHA256: String? = nil,
        createdAt: Date,
        updatedAt: Date
    ) {
        self.version = completedRanges.isEmpty ? 1 : 2
        // Credentials never reach a token: not in the URLs, not in the headers.
        self.url = HTTPURL.removingUserInfo(url)
        self.originalURL = HTTPURL.removingUserInfo(originalURL)
        self.offset = offset
        self.completedRanges = completedRanges
        self.expectedLength = expectedLength
        self.etag = etag
        self.lastModified = lastModified
        self.responseDate = responseDate
        self.acceptRanges = acceptRanges
        self.tempPath = tempPath
        self.suggestedFilename = suggestedFilename
        self.destination = destination
        self.finalName = finalName
        self.headers = headers.filter { !SensitiveHeaders.contains($0.key, extra: extraSensitive) }
        self.expectedSHA256 = expectedSHA256
        self.createdAt = createdAt.truncatedToMilliseconds
        self.updatedAt = updatedAt.truncatedToMilliseconds
    }

    /// The same token for the same bytes in a temporary file at `path` (a store that was moved).
    func movingTemporaryFile(to path: String) -> ResumeToken {
        ResumeToken(
            url: url, originalURL: originalURL, offset: offset, completedRanges: completedRanges,
            expectedLength: expectedLength, etag: etag, lastModified: lastModified, responseDate: responseDate,
            acceptRanges: acceptRanges, tempPath: path, suggestedFilename: suggestedFilename, destination: destination,
            finalName: finalName, headers: headers, expectedSHA256: expectedSHA256, createdAt: createdAt,
            updatedAt: updatedAt)
    }

    /// Whether the server advised against range requests (`Accept-Ranges: none`, RFC 9110 §14.3).
    ///
    /// Resuming such a token still works when the server answers correctly, and is safe when it does not:
    /// any answer that cannot be joined restarts the download.
    public var serverAdvisesAgainstRanges: Bool {
        acceptRanges?.trimmingCharacters(in: .whitespaces).lowercased() == "none"
    }
}

extension ResumeToken {
    /// Decodes a token from its JSON form, validating every field.
    ///
    /// - Throws: ``ResumableError`` with code ``ResumableError/Code/invalidToken`` naming the field at fault,
    ///   or ``ResumableError/Code/newerTokenVersion`` for a token from a newer format.
    public init(jsonData: Data) throws(ResumableError) {
        do {
            self = try JSONDecoder().decode(ResumeToken.self, from: jsonData)
        } catch let error as ResumableError {
            throw error
        } catch let DecodingError.keyNotFound(key, _) {
            throw .invalidToken(field: key.stringValue, "is missing")
        } catch let DecodingError.typeMismatch(_, context) {
            throw .invalidToken(
                field: context.codingPath.map(\.stringValue).joined(separator: "."), "has the wrong type")
        } catch let DecodingError.valueNotFound(_, context) {
            throw .invalidToken(field: context.codingPath.map(\.stringValue).joined(separator: "."), "is null")
        } catch let DecodingError.dataCorrupted(context) where !context.codingPath.isEmpty {
            throw .invalidToken(field: context.codingPath.map(\.stringValue).joined(separator: "."), "is out of range")
        } catch {
            throw ResumableError(.invalidToken, "resume token is not valid JSON", underlying: error)
        }
    }

    /// The token's JSON form: sorted keys, pretty-printed, slashes unescaped.
    public func jsonData() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        // Encoding a token cannot fail: every field is a string, number, boolean or null.
        return (try? encoder.encode(self)) ?? Data()
    }
}

extension Date {
    /// The date with sub-millisecond precision dropped, so that it survives an ISO 8601 round trip.
    var truncatedToMilliseconds: Date {
        Date(timeIntervalSince1970: (timeIntervalSince1970 * 1000).rounded(.down) / 1000)
    }
}

extension ResumeToken {
    /// Whether the token says that no byte is on disk yet (offset 0, no completed range): the one handed over when
    /// a response is accepted. Such a token needs no flush of its file, and a crash cannot tell it from none.
    var coversNoByte: Bool { offset == 0 && completedRanges.isEmpty }

    /// The bytes the token says are on disk: its offset, and the ranges beyond it (version 2). A token read from
    /// JSON has disjoint ranges within its length, so the sum never overflows; one made otherwise saturates.
    package var bytesCovered: Int64 {
        completedRanges.reduce(offset) { total, range in
            let (sum, overflow) = total.addingReportingOverflow(max(range.upperBound - range.lowerBound, 0))
            return overflow ? .max : sum
        }
    }
}
