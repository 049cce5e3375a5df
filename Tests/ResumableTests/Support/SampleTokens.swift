import Foundation

@testable import Resumable

extension ResumeToken {
    /// A valid token of a 1 MiB file at `http://127.0.0.1:9/f.bin` with a strong ETag, for tests that only need
    /// one: `offset` bytes in the temporary file at `tempPath`.
    static func sample(
        tempPath: String, offset: Int64 = 1000, destination: String? = nil, finalName: String? = nil,
        updatedAt: Date? = nil
    ) -> ResumeToken {
        let date = Date(timeIntervalSince1970: 1_796_000_000)
        return ResumeToken(
            url: URL(string: "http://127.0.0.1:9/f.bin")!, originalURL: URL(string: "http://127.0.0.1:9/f.bin")!,
            offset: offset, expectedLength: 1 << 20, etag: "\"e\"", lastModified: nil, responseDate: nil,
            acceptRanges: "bytes", tempPath: tempPath, suggestedFilename: "f.bin", destination: destination,
            finalName: finalName, headers: [:], createdAt: date, updatedAt: updatedAt ?? date)
    }
}
