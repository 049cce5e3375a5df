import Foundation

/// Checks that a token's temporary file is where this library would have put it.
enum TokenPlacement {
    /// Throws unless the token's temporary file lies directly in the destination's directory or in the
    /// configured temporary directory.
    static func validate(
        _ token: ResumeToken,
        destination: DownloadTask.Destination,
        temporaryDirectory: URL?
    ) throws(ResumableError) {
        let directory = (token.tempPath as NSString).deletingLastPathComponent
        var allowed = [destination.directoryPath]
        if let temporaryDirectory { allowed.append(temporaryDirectory.standardizedFileURL.path) }
        let normalized = allowed.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
        guard normalized.contains(URL(fileURLWithPath: directory).standardizedFileURL.path) else {
            throw ResumableError.invalidToken(
                field: "tempPath",
                "is not in the destination's directory (\(destination.directoryPath)): \(token.tempPath)"
            )
        }
    }
}
