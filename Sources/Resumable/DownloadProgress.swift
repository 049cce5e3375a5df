import Foundation

/// A snapshot of a download's progress.
public struct DownloadProgress: Hashable, Sendable {
    /// Bytes of the file on disk, including what was there before resuming.
    public var bytesOnDisk: Int64
    /// The size of the whole file, when the server announced it.
    public var expectedLength: Int64?
    /// The offset the current transfer joined at (0 for a fresh start), like `didResumeAtOffset`.
    public var resumedAtOffset: Int64
    /// Bytes received since this task started, over all requests.
    public var bytesTransferred: Int64
    /// The recent transfer rate, in bytes per second, over all connections.
    public var bytesPerSecond: Double
    /// How many connections are open (``DownloadTask/Configuration/connections``); 1 for a single transfer.
    public var connections: Int = 1

    /// The fraction done, from 0 to 1, when the total is known.
    public var fractionCompleted: Double? {
        guard let expectedLength, expectedLength > 0 else { return expectedLength == 0 ? 1 : nil }
        return Double(bytesOnDisk) / Double(expectedLength)
    }

    /// The estimated time left at the current rate, when the total is known.
    public var estimatedTimeRemaining: Duration? {
        guard let expectedLength, bytesPerSecond > 0 else { return nil }
        let seconds = Double(max(expectedLength - bytesOnDisk, 0)) / bytesPerSecond
        guard seconds.isFinite, seconds < 1e9 else { return nil }
        return .milliseconds(Int64(seconds * 1000))
    }
}

/// Something that happened to a download.
public enum DownloadEvent: Sendable {
    /// A response was accepted and its body is being written from `atOffset` (0 for a fresh start).
    case started(atOffset: Int64, expectedLength: Int64?)
    /// A transfer joined the bytes on disk at `atOffset`, like `didResumeAtOffset`.
    case resumed(atOffset: Int64, expectedLength: Int64?)
    /// The bytes on disk were dropped and the download starts again from byte 0.
    case restarted(reason: String)
    /// The temporary file a token named held fewer bytes than the token said (or was missing).
    case reconciled(tokenOffset: Int64, bytesOnDisk: Int64)
    /// More bytes are on disk.
    case progress(DownloadProgress)
    /// A transient failure; the transfer continues from the current offset after `delay`.
    case retrying(attempt: Int, delay: Duration, error: ResumableError)
    /// A connection of a multi-connection download (``DownloadTask/Configuration/connections``) asks for `range`.
    /// The connection that received the first answer is number 0.
    case segmentStarted(connection: Int, range: Range<Int64>)
    /// A connection's segment stopped before `remaining` arrived: the error says why (an overloaded server, a cut
    /// connection, an unusable answer). Another connection fetches the rest, or the download backs off and retries.
    case segmentFailed(connection: Int, remaining: Range<Int64>, error: ResumableError)
    /// The file is complete and in place.
    case finished(DownloadResult)
}

/// What a finished download produced.
public struct DownloadResult: Hashable, Sendable {
    /// Where the finished file is.
    public var fileURL: URL
    /// The size of the finished file.
    public var bytesOnDisk: Int64
    /// The offset the finished file was continued from: the token's offset for a resume that joined the bytes on
    /// disk, 0 for a new download and for one that ``restarted``.
    public var resumedAtOffset: Int64
    /// Whether bytes on disk were dropped and the file downloaded again from byte 0: the representation changed, the
    /// server ignored the range, or nothing proved a join safe.
    public var restarted: Bool
    /// The bytes this task received over the network.
    public var bytesTransferred: Int64
    /// The status of the last response that carried data (200 or 206), or 416 when the file was already
    /// complete.
    public var status: Int
    /// The final URL, after redirects.
    public var url: URL
    /// The `ETag` the file was received under, exactly as sent.
    public var etag: String?
    /// The `Last-Modified` the file was received under, exactly as sent.
    public var lastModified: String?
    /// The finished file's SHA-256 in lowercase hex, when the configuration (or the token) asked for it.
    public var sha256: String?
    /// The transport that moved the bytes: ``DownloadTask/Transport/libcurl`` or
    /// ``DownloadTask/Transport/urlSession``, never ``DownloadTask/Transport/automatic``.
    public var transport: DownloadTask.Transport
    /// The header fields of the last response that carried the file's bytes, keyed by lowercased name; a field sent
    /// more than once has its values joined with `", "` (RFC 9110 §5.3). Empty when this task received no bytes
    /// (its file was already complete: ``status`` 416, whose headers describe no file).
    public var responseHeaders: [String: String]
    /// The media type of the last response that carried the file's bytes, lowercased and without parameters
    /// (`application/zip` for `Application/Zip; charset=binary`), when it sent a `Content-Type`.
    public var mimeType: String?

    /// The value of the final response's header `name`, compared case-insensitively.
    public func responseHeader(_ name: String) -> String? {
        responseHeaders[name.lowercased()]
    }

    static func headerDictionary(_ headers: [HTTPHeader]) -> [String: String] {
        var fields: [String: String] = [:]
        for header in headers {
            let name = header.name.lowercased()
            fields[name] = fields[name].map { "\($0), \(header.value)" } ?? header.value
        }
        return fields
    }

    static func mimeType(_ contentType: String) -> String? {
        let first = contentType.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        let type: String
        if first.utf8.allSatisfy({ $0 < 0x80 }) {
            // ASCII (every real media type): spaces and tabs (`.whitespaces` in ASCII) trimmed without Foundation's
            // character sets, which cost more than the rest of a small file's finish.
            let bytes = Array(first.utf8)
            var lower = 0
            var upper = bytes.count
            while lower < upper, bytes[lower] == 0x20 || bytes[lower] == 0x09 { lower += 1 }
            while upper > lower, bytes[upper - 1] == 0x20 || bytes[upper - 1] == 0x09 { upper -= 1 }
            type = String(decoding: bytes[lower..<upper], as: UTF8.self).lowercased()
        } else {
            type = first.trimmingCharacters(in: .whitespaces).lowercased()
        }
        let parts = type.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy({ !$0.isEmpty && HTTPFieldSyntax.isValidName(String($0)) }) else {
            return nil
        }
        return type
    }
}
