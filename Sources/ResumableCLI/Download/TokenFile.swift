import Foundation
import Resumable
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The file a download's resume token lives in, and its only writer.
///
/// Checkpoints arrive from the library on other threads while data flows; the final token (or the removal of
/// the file) comes from the main flow when the download ends. Writes are serialized under a lock and every
/// checkpoint after the end is dropped, so a late checkpoint can never overwrite the final token or bring back
/// a token that was deliberately removed.
final class TokenFile: Sendable {
    private struct State {
        var url: URL?
        /// Whether `url` was chosen by the user (`--token`, or the token being resumed), not derived from the name.
        let chosen: Bool
        var lastToken: ResumeToken?
        /// Whether `lastToken` is the one at `url`: the token this run was given, or the last one it wrote, and not one
        /// whose write failed.
        var lastTokenIsWritten = true
        var ended = false
        var replaced: ResumeToken?
        /// The token file of another unfinished download that a write of this run found at the default path, and
        /// left alone; reported once.
        var keptBeside: ResumeToken?
        /// The number in the default path's name (`<name>.<number>.resumable.json`), from 1 (none).
        var number = 1
    }

    private let state: Mutex<State>

    /// A token file at `url`; with `nil` the file goes next to the destination (see ``defaultURL(for:number:)``).
    init(url: URL?, knownToken: ResumeToken? = nil) {
        state = Mutex(State(url: url, chosen: url != nil, lastToken: knownToken))
    }

    /// `<destination directory>/<final file name>.resumable.json`: beside where the finished file goes; with a
    /// `number` from 2, `<final file name>.<number>.resumable.json`, for when that one is another download's.
    static func defaultURL(for token: ResumeToken, number: Int = 1) -> URL {
        let suffix = number > 1 ? ".\(number).resumable.json" : ".resumable.json"
        let destination = token.destination ?? ((token.tempPath as NSString).deletingLastPathComponent + "/")
        if destination.hasSuffix("/") {
            return URL(fileURLWithPath: destination, isDirectory: true)
                .appendingPathComponent(token.suggestedFilename + suffix, isDirectory: false)
        }
        return URL(fileURLWithPath: destination + suffix, isDirectory: false)
    }

    /// Where the token is (or would be) written, once known.
    var url: URL? {
        state.withLock { $0.url }
    }

    /// Writes a checkpoint, unless the download already ended.
    ///
    /// - Returns: Where it was written, `nil` when dropped, or the error when writing failed.
    func checkpoint(_ token: ResumeToken) -> Result<URL, ResumableError>? {
        state.withLock { state in
            guard !state.ended else { return nil }
            return Self.write(token, into: &state)
        }
    }

    /// Ends the download: writes `token` when there is one to leave behind; otherwise removes the token file
    /// this run wrote or resumed from, if the temporary file it names is gone (the token would be useless), and keeps
    /// it while that file is there: a download whose last flush failed hands out no token, and a checkpoint this run
    /// wrote earlier, or the token it resumed, still describes bytes in the file.
    ///
    /// - Returns: The token left behind and where it was written (or the error when writing it failed): `token`, or
    ///   the checkpoint this run wrote last (or the token it was given), kept; `nil` when none was left.
    func end(leaving token: ResumeToken?) -> (written: Result<URL, ResumableError>, token: ResumeToken)? {
        state.withLock { state in
            state.ended = true
            if let token { return (Self.write(token, into: &state), token) }
            // Only a file this run wrote (or was given to resume) is removed, and only when it is useless.
            guard let url = state.url, let last = state.lastToken else { return nil }
            guard FileManager.default.fileExists(atPath: last.tempPath) else {
                ResumeToken.removeFile(at: url, ifItNames: last.tempPath)
                return nil
            }
            // A checkpoint this run wrote, or else the token it was given, still the file's last word: it is what is
            // left to resume from.
            guard state.lastTokenIsWritten else { return nil }
            return (.success(url), last)
        }
    }

    /// Ends a download that has nothing left to resume, right before the library removes its temporary file at
    /// `tempPath`: the token file goes first (if it names that file), so a crash in between never leaves a token
    /// without its bytes. No checkpoint is written after this.
    ///
    /// - Returns: false when the token file still names the temporary file (it could not be removed): the library
    ///   then keeps the file.
    func abandon(tempPath: String) -> Bool {
        state.withLock { state in
            state.ended = true
            guard let url = state.url else { return true }
            return ResumeToken.removeFileBeforeItsTemporaryFile(at: url, naming: tempPath)
        }
    }

    /// Ends a download that completed: the token file is removed.
    func endCompleted() {
        state.withLock { state in
            state.ended = true
            // Only our own token: another download's that replaced it, or the finished file itself when the
            // token path was also the destination, stays.
            if let url = state.url, let last = state.lastToken {
                ResumeToken.removeFile(at: url, ifItNames: last.tempPath)
            }
        }
    }

    /// The token of another, still resumable download that a write of this run replaced; reported once.
    ///
    /// That happens only at a path the user chose (`--token`): the earlier partial file stays on disk but nothing
    /// points at it any more, which deserves a warning.
    func takeReplacedToken() -> ResumeToken? {
        state.withLock { state in
            defer { state.replaced = nil }
            return state.replaced
        }
    }

    /// The token of another unfinished download found where this download's token would have gone by default, and
    /// left in place, once: this one's token went to the next free numbered name instead.
    ///
    /// That happens when `get` is run again instead of `resume`, or when another download, perhaps from another
    /// server, suggested the same file name: replacing its token would leave its partial file resumable by nobody.
    func takeTokenKeptBeside() -> ResumeToken? {
        state.withLock { state in
            defer { state.keptBeside = nil }
            return state.keptBeside
        }
    }

    private static func write(_ token: ResumeToken, into state: inout State) -> Result<URL, ResumableError> {
        // Each write replaces only what its look judged replaceable; when the path changed between the look and the
        // write (another process took the name), it looks again.
        for _ in 0..<8 {
            switch attempt(token, into: &state) {
            case .written(let url): return .success(url)
            case .failed(let error): return .failure(error)
            case .changed: continue
            }
        }
        let path = (state.url ?? defaultURL(for: token)).path
        return .failure(.fileSystem("writing the resume token (the path kept changing) to", path: path, errno: EAGAIN))
    }

    private enum Attempt {
        case written(URL)
        case failed(ResumableError)
        /// What was at the path when it was looked at is no longer there: nothing was written.
        case changed
    }

    private static func attempt(_ token: ResumeToken, into state: inout State) -> Attempt {
        // Checked before every write, not the first only: another file may take the path while the download runs.
        var url = state.url ?? defaultURL(for: token)
        var occupant = AtomicFile.Occupant.at(url.path)
        while occupant != .nothing {
            let emptyRegularFile = Self.isEmptyRegularFile(at: url)
            let earlier: ResumeToken
            do {
                earlier = try ResumeToken(contentsOf: url)
            } catch {
                // Not a token: a finished download a server named so, a pipe, anything else of the user's. Never
                // replaced (a token written there would be removed when the download ends, taking the file with
                // it), except an empty regular file the user named (`--token "$(mktemp)"`).
                if state.chosen, emptyRegularFile { break }
                guard !state.chosen, state.number < 1000 else { return .failed(error) }
                state.number += 1
                url = defaultURL(for: token, number: state.number)
                occupant = AtomicFile.Occupant.at(url.path)
                continue
            }
            // What was judged must be what the write will replace: read from the file that was looked at.
            guard AtomicFile.Occupant.at(url.path) == occupant else { return .changed }
            // This download's own token, also one naming the file it used before a restart.
            let own = [token.tempPath, state.lastToken?.tempPath].contains { path in
                path.map { earlier.tempPath.utf8.elementsEqual($0.utf8) } ?? false
            }
            if own { break }
            // A download that is running right now owns this token file: never take it over (its partial file
            // would be orphaned, and our success would delete its token). The library stops.
            if case .refused(let error) = Reconciliation.inspect(earlier).state, error.code == .tokenInUse {
                return .failed(error)
            }
            // A token whose partial file is gone is no use to anyone: it is replaced.
            guard FileManager.default.fileExists(atPath: earlier.tempPath) else { break }
            // An unfinished download's token at a path the user named is replaced, with a warning (so is the
            // thousandth of one name); at the default path it stays, and this one's goes to the next number.
            guard !state.chosen, state.number < 1000 else {
                state.replaced = earlier
                break
            }
            if state.keptBeside == nil { state.keptBeside = earlier }
            state.number += 1
            url = defaultURL(for: token, number: state.number)
            occupant = AtomicFile.Occupant.at(url.path)
        }
        state.url = url
        state.lastToken = token
        state.lastTokenIsWritten = false
        do {
            guard try token.write(to: url, replacing: occupant) else { return .changed }
            state.lastTokenIsWritten = true
            return .written(url)
        } catch {
            return .failed(error)
        }
    }

    /// Whether `url` names an empty regular file (a pipe, a socket or a device has no size either, and is no such
    /// file; a symbolic link is not followed).
    private static func isEmptyRegularFile(at url: URL) -> Bool {
        var status = stat()
        guard lstat(url.path, &status) == 0 else { return false }
        return (status.st_mode & S_IFMT) == S_IFREG && status.st_size == 0
    }
}
