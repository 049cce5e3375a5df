import Foundation
import Resumable

/// The tool's exit statuses, following `sysexits.h` and the shell's 128 + signal convention.
enum ExitCode: Int32, Sendable {
    /// The file is complete and in place (or, for `inspect` and `serve`, the command did its job).
    case success = 0
    /// A permanent failure: an HTTP error status, a checksum mismatch, a file system error.
    case failure = 1
    /// The command line was wrong (`EX_USAGE`).
    case usage = 64
    /// The resume token is unreadable, invalid, from a newer version, or its download is gone (`EX_DATAERR`).
    case dataError = 65
    /// A transient failure after the retries ran out, a full disk, or the token is in use by another process
    /// (`EX_TEMPFAIL`): trying again later may succeed.
    case temporaryFailure = 75
    /// Interrupted by SIGINT (128 + 2); a token was left behind when anything was on disk.
    case interrupted = 130
    /// Terminated by SIGTERM (128 + 15); a token was left behind when anything was on disk.
    case terminated = 143

    /// The exit status for a failed download or resume.
    static func forError(_ error: ResumableError) -> ExitCode {
        switch error.code {
        case .invalidToken, .newerTokenVersion, .tokenGone, .destinationRequired:
            return .dataError
        case .paused:
            // Only an interrupt pauses a CLI download; the signal's own status is chosen by `forSignal`.
            return .interrupted
        case .tokenInUse, .diskFull:
            // A full disk is temporary too: free space, then `resumable resume`.
            return .temporaryFailure
        default:
            return error.isTransient ? .temporaryFailure : .failure
        }
    }

    /// The exit status for a download stopped by `signal`.
    static func forSignal(_ signal: Int32) -> ExitCode {
        signal == SIGTERM ? .terminated : .interrupted
    }

    /// Ends the process with this status.
    func exit() -> Never {
        Foundation.exit(rawValue)
    }
}
