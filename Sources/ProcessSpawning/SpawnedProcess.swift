import CProcessSpawning
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A child process started with `posix_spawn`, for the tests (servers, tools, the built `resumable`) and the
/// CLI's `demo`.
///
/// Why not Foundation's `Process`: swift-corelibs-foundation's `Process.run()` lists `/proc/self/fd` with a struct
/// copy of each `dirent` that reads past glibc's buffer, so a process with many descriptors open (a test process
/// with hundreds of loopback sockets) crashes in `memmove` now and then (swiftlang/swift-corelibs-foundation#5472).
/// The crash froze the test process for minutes while the runtime's backtracer symbolicated hundreds of threads.
///
/// Here the child closes every descriptor above standard error (`posix_spawn_file_actions_addclosefrom_np`),
/// starts with no signal blocked and every signal at its default action (the threads Swift concurrency runs on
/// block SIGTERM, and a child would inherit that), and is reaped only by this value: `waitid(WNOWAIT)` waits without
/// reaping, and the reaping `waitpid` runs under a lock with the result kept, so a process id is never waited for
/// after it could have been reused.
public final class SpawnedProcess: Sendable {
    /// Where one of the child's standard streams goes.
    public enum Stream: Sendable {
        /// This process's own stream.
        case inherit
        /// `/dev/null`.
        case nullDevice
        /// An open file handle; the child gets a copy, the caller keeps (and closes) the original.
        case handle(FileHandle)
        /// The child's end of a pipe: the read end for standard input, the write end for output. The parent's copy
        /// of the child's end is closed once the child started, so end of file arrives when the child exits.
        case pipe(Pipe)
    }

    /// How the child ended.
    public enum Termination: Sendable, Hashable, CustomStringConvertible {
        /// It called `exit` with this status.
        case exited(Int32)
        /// A signal ended it.
        case signaled(Int32)
        /// It ended, but someone else reaped it, so how is lost: the kernel reaps every child itself while this
        /// process ignores SIGCHLD (a disposition inherited across `exec`), and any `waitpid` elsewhere may.
        case unknown

        /// The exit status, when the child called `exit`.
        public var exitStatus: Int32? {
            if case .exited(let status) = self { status } else { nil }
        }

        /// The signal that ended the child, when one did.
        public var signal: Int32? {
            if case .signaled(let signal) = self { signal } else { nil }
        }

        /// The status a shell reports: the exit status, or 128 + the signal.
        public var shellStatus: Int32 {
            switch self {
            case .exited(let status): status
            case .signaled(let signal): 128 + signal
            case .unknown: 255
            }
        }

        public var description: String {
            switch self {
            case .exited(let status): "exit \(status)"
            case .signaled(let signal): "signal \(signal)"
            case .unknown: "ended, reaped elsewhere"
            }
        }
    }

    /// Why a child could not be started.
    public struct SpawnError: Error, CustomStringConvertible {
        /// What failed.
        public let operation: String
        /// The error number.
        public let errno: Int32

        public var description: String { "\(operation) failed: \(String(cString: strerror(errno))) (errno \(errno))" }
    }

    /// The child's process id.
    public let processIdentifier: Int32
    private let ended = Mutex<Termination?>(nil)

    /// Starts `executable` with `arguments`.
    ///
    /// - Parameters:
    ///   - environment: The child's whole environment; `nil`: this process's.
    ///   - currentDirectory: Where the child starts; `nil`: this process's current directory.
    public init(
        executable: URL,
        arguments: [String] = [],
        environment: [String: String]? = nil,
        currentDirectory: URL? = nil,
        standardInput: Stream = .inherit,
        standardOutput: Stream = .inherit,
        standardError: Stream = .inherit
    ) throws {
        var actions = posix_spawn_file_actions_t()
        try Self.check("posix_spawn_file_actions_init", posix_spawn_file_actions_init(&actions))
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        try Self.check("posix_spawnattr_init", posix_spawnattr_init(&attributes))
        defer { posix_spawnattr_destroy(&attributes) }

        let streams = [(standardInput, Int32(0)), (standardOutput, Int32(1)), (standardError, Int32(2))]
        for (stream, target) in streams {
            switch stream {
            case .inherit:
                break
            case .nullDevice:
                let flags = target == 0 ? O_RDONLY : O_WRONLY
                try Self.check(
                    "posix_spawn_file_actions_addopen",
                    posix_spawn_file_actions_addopen(&actions, target, "/dev/null", flags, 0))
            case .handle(let handle):
                try Self.check(
                    "posix_spawn_file_actions_adddup2",
                    posix_spawn_file_actions_adddup2(&actions, handle.fileDescriptor, target))
            case .pipe(let pipe):
                let end = target == 0 ? pipe.fileHandleForReading : pipe.fileHandleForWriting
                try Self.check(
                    "posix_spawn_file_actions_adddup2",
                    posix_spawn_file_actions_adddup2(&actions, end.fileDescriptor, target))
            }
        }
        #if os(Linux)
            try Self.check("posix_spawn_file_actions_addclosefrom_np", resumable_spawn_add_close_from(&actions, 3))
            if let currentDirectory {
                try Self.check(
                    "posix_spawn_file_actions_addchdir_np", resumable_spawn_add_chdir(&actions, currentDirectory.path))
            }
        #endif

        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        try Self.check("posix_spawnattr_setsigmask", posix_spawnattr_setsigmask(&attributes, &noSignals))
        var defaults = sigset_t()
        sigemptyset(&defaults)
        // glibc leaves its two internal real-time signals (32 and 33) as they are.
        for signal in 1..<32 where signal != SIGKILL && signal != SIGSTOP {
            sigaddset(&defaults, Int32(signal))
        }
        try Self.check("posix_spawnattr_setsigdefault", posix_spawnattr_setsigdefault(&attributes, &defaults))
        try Self.check(
            "posix_spawnattr_setflags",
            posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)))

        let environmentLines = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let argv = [executable.path] + arguments
        var pid: pid_t = 0
        let status = Self.withCStrings(argv) { argv in
            Self.withCStrings(environmentLines) { envp in
                posix_spawn(&pid, executable.path, &actions, &attributes, argv, envp)
            }
        }
        try Self.check("posix_spawn \(executable.path)", status)
        processIdentifier = pid

        // The parent's copies of the child's pipe ends: the child has its own now.
        for (stream, target) in streams {
            guard case .pipe(let pipe) = stream else { continue }
            try? (target == 0 ? pipe.fileHandleForReading : pipe.fileHandleForWriting).close()
        }
    }

    deinit {
        // Reap a child that exited, so it does not stay a zombie; one still running is left alone (the owner
        // signals it first when it should end with the value).
        _ = poll()
    }

    /// How the child ended, once it did; `nil` while it runs. Never blocks.
    public var termination: Termination? { poll() }

    /// Whether the child is still running. Never blocks.
    public var isRunning: Bool { poll() == nil }

    /// Sends `signal` to the child, unless it has been reaped (its process id could belong to another process).
    public func send(_ signal: Int32) {
        ended.withLock { ended in
            if ended == nil { _ = kill(processIdentifier, signal) }
        }
    }

    /// Waits for the child to end, blocking the calling thread: for threads of one's own, never for a thread of
    /// Swift concurrency's pool (see ``exit()``).
    @discardableResult
    public func waitUntilExit() -> Termination {
        while true {
            if let termination = poll() { return termination }
            var info = siginfo_t()
            // Waits for the exit without reaping, so the process id stays this child's until `poll` reaps it.
            let result = waitid(P_PID, id_t(processIdentifier), &info, WEXITED | WNOWAIT)
            if result != 0 && errno != EINTR {
                // ECHILD: another thread reaped it meanwhile; poll returns what it kept.
                if let termination = poll() { return termination }
                usleep(1000)
            }
        }
    }

    /// Waits for the child to end without blocking a thread: polls every few milliseconds on `Task.sleep`.
    public func exit() async -> Termination {
        var interval = 1
        while true {
            if let termination = poll() { return termination }
            try? await Task.sleep(for: .milliseconds(interval))
            interval = min(interval * 2, 20)
        }
    }

    /// Runs `executable` to its end, blocking the calling thread (so only for threads of one's own): writes
    /// `input` to its standard input (on a thread of its own, then end of file; `nil`: `/dev/null`) and collects its
    /// standard output.
    public static func run(
        executable: URL,
        arguments: [String] = [],
        environment: [String: String]? = nil,
        currentDirectory: URL? = nil,
        input: Data? = nil,
        standardError: Stream = .inherit
    ) throws -> (termination: Termination, output: Data) {
        let inputPipe = input.map { _ in Pipe() }
        let outputPipe = Pipe()
        let process = try SpawnedProcess(
            executable: executable,
            arguments: arguments,
            environment: environment,
            currentDirectory: currentDirectory,
            standardInput: inputPipe.map { .pipe($0) } ?? .nullDevice,
            standardOutput: .pipe(outputPipe),
            standardError: standardError
        )
        if let inputPipe, let input {
            let writer = Thread {
                // A child that exits without reading makes this write fail (EPIPE), which is fine.
                try? inputPipe.fileHandleForWriting.write(contentsOf: input)
                try? inputPipe.fileHandleForWriting.close()
            }
            writer.name = "SpawnedProcess.input"
            writer.start()
        }
        let output = outputPipe.fileHandleForReading.readDataToEndOfFile()
        try? outputPipe.fileHandleForReading.close()
        return (process.waitUntilExit(), output)
    }

    /// Reaps the child if it exited, keeping the result; returns it.
    private func poll() -> Termination? {
        ended.withLock { ended in
            if let ended { return ended }
            var status: Int32 = 0
            let result = waitpid(processIdentifier, &status, WNOHANG)
            if result == -1, errno == ECHILD {
                // No longer a child of this process: it ended and was reaped elsewhere (see `unknown`). Waiting
                // again would wait forever, and its process id may be another process's now.
                ended = .unknown
                return ended
            }
            guard result == processIdentifier else { return nil }
            // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import as functions.
            let signal = status & 0x7f
            ended = signal == 0 ? .exited((status >> 8) & 0xff) : .signaled(signal)
            return ended
        }
    }

    private static func check(_ operation: String, _ status: Int32) throws {
        guard status == 0 else { throw SpawnError(operation: operation, errno: status) }
    }

    /// Calls `body` with a `NULL`-terminated array of C strings.
    private static func withCStrings<Result>(
        _ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> Result
    ) -> Result {
        let pointers = strings.map { strdup($0) } + [nil]
        defer { pointers.forEach { free($0) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
