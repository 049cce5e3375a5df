import Foundation
import Resumable

/// The JSON forms of download events and final results (`--json`), documented in `docs/cli.md`.
///
/// Events are single-line objects whose first key is `"event"`; final results are single-line objects whose
/// first key is `"status"`. Byte counts are integers; absent values are `null`.
enum EventJSON {
    /// One JSON line for a library event.
    static func event(_ event: DownloadEvent) -> JSONValue {
        switch event {
        case .started(let offset, let expectedLength):
            return .object([
                ("event", .string("started")), ("offset", .int(offset)), ("expectedLength", .int(expectedLength)),
            ])
        case .resumed(let offset, let expectedLength):
            return .object([
                ("event", .string("resumed-at")), ("offset", .int(offset)),
                ("expectedLength", .int(expectedLength)),
            ])
        case .restarted(let reason):
            return .object([("event", .string("restarted")), ("reason", .string(reason))])
        case .reconciled(let tokenOffset, let bytesOnDisk):
            return .object([
                ("event", .string("reconciled")), ("tokenOffset", .int(tokenOffset)),
                ("bytesOnDisk", .int(bytesOnDisk)),
            ])
        case .progress(let progress):
            return .object([
                ("event", .string("progress")),
                ("bytesOnDisk", .int(progress.bytesOnDisk)),
                ("expectedLength", .int(progress.expectedLength)),
                ("resumedAtOffset", .int(progress.resumedAtOffset)),
                ("bytesTransferred", .int(progress.bytesTransferred)),
                (
                    "bytesPerSecond",
                    .int(progress.bytesPerSecond.isFinite ? ByteFormat.wholeNumber(progress.bytesPerSecond) : 0)
                ),
                ("connections", .int(Int64(progress.connections))),
            ])
        case .segmentStarted(let connection, let range):
            return .object([
                ("event", .string("segment")), ("connection", .int(Int64(connection))),
                ("start", .int(range.lowerBound)), ("end", .int(range.upperBound)),
            ])
        case .segmentFailed(let connection, let remaining, let error):
            return .object([
                ("event", .string("segment-failed")), ("connection", .int(Int64(connection))),
                ("start", .int(remaining.lowerBound)), ("end", .int(remaining.upperBound)),
                ("error", self.error(error)),
            ])
        case .retrying(let attempt, let delay, let error):
            return .object([
                ("event", .string("retry")), ("attempt", .int(Int64(attempt))),
                ("delayMilliseconds", .int(milliseconds(delay))), ("error", self.error(error)),
            ])
        case .finished(let result):
            return .object([
                ("event", .string("finished")), ("path", .string(result.fileURL.path)),
                ("bytes", .int(result.bytesOnDisk)),
            ])
        }
    }

    /// `{"event":"checkpoint","token":…,"offset":…}`: a token was written to disk.
    static func checkpoint(_ token: ResumeToken, at url: URL) -> JSONValue {
        .object([("event", .string("checkpoint")), ("token", .string(url.path)), ("offset", .int(token.offset))])
    }

    /// `{"event":"warning","message":…}`: something went wrong that does not end the download.
    static func warning(_ message: String) -> JSONValue {
        .object([("event", .string("warning")), ("message", .string(message))])
    }

    /// `{"event":"paused","signal":"SIGINT"}`: a signal arrived and the download is pausing into a token.
    static func paused(_ signal: Int32) -> JSONValue {
        .object([("event", .string("paused")), ("signal", .string(SignalWatcher.name(of: signal)))])
    }

    /// `{"event":"failed","error":{…}}`: the download ended without a file.
    static func failedEvent(_ error: ResumableError) -> JSONValue {
        .object([("event", .string("failed")), ("error", self.error(error))])
    }

    /// The final object of a completed download.
    static func completed(_ result: DownloadResult) -> JSONValue {
        .object([
            ("status", .string("completed")),
            ("path", .string(result.fileURL.path)),
            ("bytes", .int(result.bytesOnDisk)),
            ("sha256", .string(result.sha256)),
            ("resumedFrom", .int(result.resumedAtOffset)),
            ("restarted", .bool(result.restarted)),
            ("bytesTransferred", .int(result.bytesTransferred)),
            ("httpStatus", .int(Int64(result.status))),
            ("url", .string(result.url.absoluteString)),
            ("etag", .string(result.etag)),
            ("lastModified", .string(result.lastModified)),
            ("mimeType", .string(result.mimeType)),
            ("transport", .string(result.transport.description)),
            ("exitCode", .int(0)),
        ])
    }

    /// The final object of a download that failed; `token` is where a resume token was left, if any.
    static func failed(_ error: ResumableError, token: (URL, ResumeToken)?, exitCode: ExitCode) -> JSONValue {
        .object([
            ("status", .string("failed")),
            ("error", self.error(error)),
            ("token", .string(token?.0.path)),
            ("offset", .int(token?.1.offset)),
            ("exitCode", .int(Int64(exitCode.rawValue))),
        ])
    }

    /// The final object of a download stopped by a signal.
    static func interrupted(_ signal: Int32, token: (URL, ResumeToken)?, exitCode: ExitCode) -> JSONValue {
        .object([
            ("status", .string("interrupted")),
            ("signal", .string(SignalWatcher.name(of: signal))),
            ("token", .string(token?.0.path)),
            ("offset", .int(token?.1.offset)),
            ("expectedLength", .int(token?.1.expectedLength)),
            ("exitCode", .int(Int64(exitCode.rawValue))),
        ])
    }

    /// `{"code":…,"message":…,"httpStatus":…,"transient":…}`.
    static func error(_ error: ResumableError) -> JSONValue {
        .object([
            ("code", .string(error.code.description)),
            ("message", .string(error.message)),
            ("httpStatus", .int(error.httpStatus.map(Int64.init))),
            ("transient", .bool(error.isTransient)),
        ])
    }

    private static func milliseconds(_ duration: Duration) -> Int64 {
        ByteFormat.milliseconds(duration)
    }
}
