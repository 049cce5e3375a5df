import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Every step that changes what is on disk — a write, a flush, a truncation, a token write, a rename, a
/// link, an unlink — passes through here, so that crash consistency can be tested step by step.
///
/// In debug builds two environment variables turn it into a crash-point seam (the method of SQLite's crash
/// tests and of the ALICE study): `RESUMABLE_STEP_LOG=FILE` appends one line per step (`N kind path`), and
/// `RESUMABLE_CRASH_AFTER_STEP=N` ends the process with `_exit(137)` right after step N, as `kill -9` would;
/// `RESUMABLE_CRASH_AFTER_STEP_MATCHING="KIND PATH"` right after the first step of that kind on that path, however
/// many steps came before it (checkpoints written or not, depending on timing). `RESUMABLE_FAIL_FLUSHES_WHILE=FILE`
/// makes every flush of a download's file fail with `EIO` while `FILE` exists (for a child process; in-process, see
/// ``failing(_:under:errno:times:)``). Release builds compile them away.
package enum DurableSteps {
    /// What a step did.
    package enum Kind: String, Sendable {
        case create, write, flush, truncate, tokenWrite = "token-write", rename, link, unlink
        /// A directory's entries flushed, where a step depends on it (a temporary file's name before a token counts on it).
        case flushDirectory = "flush-directory"
    }

    #if DEBUG
        private static let configuration:
            (log: Int32?, crashAfter: Int?, crashMatching: String?, failFlushesWhile: String?) = {
                let environment = ProcessInfo.processInfo.environment
                let log = environment["RESUMABLE_STEP_LOG"].map {
                    open($0, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
                }
                let crashAfter = environment["RESUMABLE_CRASH_AFTER_STEP"].flatMap { Int($0) }
                return (
                    log.flatMap { $0 >= 0 ? $0 : nil }, crashAfter, environment["RESUMABLE_CRASH_AFTER_STEP_MATCHING"],
                    environment["RESUMABLE_FAIL_FLUSHES_WHILE"]
                )
            }()
        private static let counter = Atomic<Int>(0)
    #endif

    /// Records that a step of `kind` on `path` completed.
    @inline(__always)
    package static func record(_ kind: Kind, _ path: String) {
        #if DEBUG
            let configuration = self.configuration
            guard configuration.log != nil || configuration.crashAfter != nil || configuration.crashMatching != nil
            else { return }
            let number = counter.add(1, ordering: .sequentiallyConsistent).newValue
            if let log = configuration.log {
                let line = Array("\(number) \(kind.rawValue) \(path)\n".utf8)
                #if canImport(Glibc)
                    _ = line.withUnsafeBytes { Glibc.write(log, $0.baseAddress, $0.count) }
                #else
                    _ = line.withUnsafeBytes { Darwin.write(log, $0.baseAddress, $0.count) }
                #endif
            }
            if number == configuration.crashAfter { _exit(137) }
            if let matching = configuration.crashMatching, matching.utf8.elementsEqual("\(kind.rawValue) \(path)".utf8)
            {
                _exit(137)
            }
        #endif
    }

    #if DEBUG
        /// What ``failing(_:under:errno:times:)`` set: steps of a kind on paths under a prefix fail with an `errno`, each
        /// time or only the next `remaining` times.
        private static let injectedFailures = Mutex<[(kind: Kind, prefix: String, errno: Int32, remaining: Int?)]>([])

        /// Test seam (debug builds): from now on, every step of `kind` on a path that starts with `prefix` fails with
        /// `errno` before it is attempted, as a failing disk would make it fail; `nil` ends that. For the steps whose
        /// failure cannot be provoked on a healthy machine (a flush), in-process, so each test names its own directory.
        ///
        /// With `times`, only the next `times` such steps fail, and the rest succeed: as Linux reports a failed
        /// writeback to `fdatasync` once (the pages that could not be written are marked clean, their data gone), and
        /// the next `fdatasync` returns 0.
        package static func failing(_ kind: Kind, under prefix: String, errno code: Int32?, times: Int? = nil) {
            injectedFailures.withLock { failures in
                failures.removeAll { $0.kind == kind && $0.prefix == prefix }
                if let code { failures.append((kind, prefix, code, times)) }
            }
        }

        /// Whether a failure set with ``failing(_:under:errno:times:)`` for `kind` under `prefix` is still to come.
        package static func isFailing(_ kind: Kind, under prefix: String) -> Bool {
            injectedFailures.withLock { failures in failures.contains { $0.kind == kind && $0.prefix == prefix } }
        }

        /// The `errno` a step of `kind` on `path` fails with (``failing(_:under:errno:times:)``), or `nil`.
        static func injectedFailure(_ kind: Kind, _ path: String) -> Int32? {
            if kind == .flush, let marker = configuration.failFlushesWhile, access(marker, F_OK) == 0 { return EIO }
            return injectedFailures.withLock { failures in
                guard
                    let index = failures.firstIndex(where: { $0.kind == kind && path.utf8.starts(with: $0.prefix.utf8) }
                    )
                else { return nil }
                let code = failures[index].errno
                if let remaining = failures[index].remaining {
                    if remaining <= 1 { failures.remove(at: index) } else { failures[index].remaining = remaining - 1 }
                }
                return code
            }
        }
    #endif

    /// What a directory flush came to.
    enum DirectoryFlush {
        case flushed
        /// The directory could not be opened (`errno`): not readable to this user (a drop box, mode -wx), no
        /// descriptor left, gone. Nothing was tried.
        case notOpened(Int32)
        /// `fsync` failed with `errno`.
        case failed(Int32)
    }

    /// Flushes `directory`'s entries (a rename or unlink in it): after a token write, a finished file's move and a
    /// record's removal, best effort; before the first token that counts on a temporary file's name, checked
    /// (``PartialFile/synchronize()``). `""` is the current directory.
    @discardableResult
    static func flushDirectory(_ directory: String) -> DirectoryFlush {
        let descriptor = open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { return .notOpened(errno) }
        let outcome: DirectoryFlush = fsync(descriptor) == 0 ? .flushed : .failed(errno)
        close(descriptor)
        return outcome
    }
}
