import Foundation
import LoopbackServer
import ProcessSpawning
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What a finished run of the `resumable` executable produced.
struct CLIResult: Sendable, CustomStringConvertible {
    /// The exit status; `nil` when a signal ended the process instead of `exit`.
    let exitCode: Int32?
    /// The signal that ended the process, if one did.
    let signal: Int32?
    /// Everything written to standard output.
    let stdout: String
    /// Everything written to standard error.
    let stderr: String

    /// Standard output's lines, without empty ones.
    var stdoutLines: [String] { stdout.split(separator: "\n").map(String.init) }
    /// Standard error's lines, without empty ones.
    var stderrLines: [String] { stderr.split(separator: "\n").map(String.init) }

    var description: String {
        "exit \(exitCode.map(String.init) ?? "-") signal \(signal.map(String.init) ?? "-")\n"
            + "--- stdout\n\(stdout)--- stderr\n\(stderr)"
    }
}

/// A running `resumable` process with its output collected as it arrives.
final class CLIProcess: Sendable {
    /// The process id.
    let pid: Int32
    private let process: SpawnedProcess
    private let output = Mutex((stdout: Data(), stderr: Data(), openStreams: 2))
    private let exitInstant = Mutex<ContinuousClock.Instant?>(nil)

    /// The built `resumable` executable: `RESUMABLE_CLI` when set, else beside the test bundle.
    static let executable: URL = locateExecutable()

    /// Starts `resumable` with `arguments` in `directory`; with `fileSizeLimit`, under `ulimit -f` (in
    /// 512-byte blocks), so writes past it fail with `EFBIG` as on a full disk; with `environment`, those variables
    /// set on top of this process's environment.
    init(
        _ arguments: [String], in directory: URL, fileSizeLimit blocks: Int? = nil, environment: [String: String] = [:]
    ) throws {
        let executable: URL
        let fullArguments: [String]
        if let blocks {
            executable = URL(fileURLWithPath: "/bin/sh")
            fullArguments = ["-c", "ulimit -f \(blocks) && exec \"$0\" \"$@\"", Self.executable.path] + arguments
        } else {
            executable = Self.executable
            fullArguments = arguments
        }
        let stdout = Pipe()
        let stderr = Pipe()
        let process = try SpawnedProcess(
            executable: executable,
            arguments: fullArguments,
            environment: environment.isEmpty ? nil : ProcessInfo.processInfo.environment.merging(environment) { $1 },
            currentDirectory: directory,
            standardInput: .nullDevice,
            standardOutput: .pipe(stdout),
            standardError: .pipe(stderr)
        )
        pid = process.processIdentifier
        self.process = process
        collect(stdout.fileHandleForReading, isStandardError: false)
        collect(stderr.fileHandleForReading, isStandardError: true)
        let thread = Thread { [self] in
            self.process.waitUntilExit()
            self.exitInstant.withLock { $0 = ContinuousClock.now }
        }
        thread.start()
    }

    /// Whether the process still runs.
    var isRunning: Bool { exitInstant.withLock { $0 == nil } }

    /// When the process ended, as a thread of its own saw it (`nil` while it runs): for a bound on how long the
    /// process took that does not count the time the test's own threads, on a busy cooperative pool, took to notice.
    var exitedAt: ContinuousClock.Instant? { exitInstant.withLock { $0 } }

    /// Runs `resumable` to its end.
    static func run(
        _ arguments: [String], in directory: URL, timeout: Duration = CLIProcess.deadline,
        environment: [String: String] = [:]
    ) async throws -> CLIResult {
        try await start(arguments, in: directory, environment: environment).finish(timeout: timeout)
    }

    /// Starts `resumable` as ``init(_:in:fileSizeLimit:environment:)`` does.
    static func start(
        _ arguments: [String], in directory: URL, fileSizeLimit blocks: Int? = nil, environment: [String: String] = [:]
    ) async throws -> CLIProcess {
        try CLIProcess(arguments, in: directory, fileSizeLimit: blocks, environment: environment)
    }

    /// Sends `signal` to the process.
    func send(_ signal: Int32) {
        process.send(signal)
    }

    /// Standard output so far.
    var stdoutSoFar: String { output.withLock { String(decoding: $0.stdout, as: UTF8.self) } }
    /// Standard error so far.
    var stderrSoFar: String { output.withLock { String(decoding: $0.stderr, as: UTF8.self) } }

    /// How long a test waits for a process, or for something a process does, before it counts as hung: generous,
    /// as the whole suite runs in parallel and a busy machine can keep a process waiting for many seconds.
    static let deadline: Duration = .seconds(120)

    /// Waits for the process to exit and its output to end; kills it and fails the test after `timeout`.
    ///
    /// It polls on `Task.sleep` (the output is read on threads of its own), so no thread of the cooperative pool
    /// blocks meanwhile.
    func finish(timeout: Duration = CLIProcess.deadline) async throws -> CLIResult {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while process.isRunning || output.withLock({ $0.openStreams > 0 }) {
            if clock.now >= deadline {
                send(SIGKILL)
                Issue.record("resumable did not finish within \(timeout)")
                try await Task.sleep(for: .milliseconds(200))
                break
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        let termination = await process.exit()
        return output.withLock { output in
            CLIResult(
                exitCode: termination.exitStatus,
                signal: termination.signal,
                stdout: String(decoding: output.stdout, as: UTF8.self),
                stderr: String(decoding: output.stderr, as: UTF8.self)
            )
        }
    }

    /// Reads a pipe on its own thread until end of file.
    private func collect(_ handle: FileHandle, isStandardError: Bool) {
        let descriptor = handle.fileDescriptor
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { break }
                self.output.withLock { output in
                    if isStandardError {
                        output.stderr.append(contentsOf: buffer[0..<count])
                    } else {
                        output.stdout.append(contentsOf: buffer[0..<count])
                    }
                }
            }
            withExtendedLifetime(handle) {}
            self.output.withLock { $0.openStreams -= 1 }
        }
        thread.start()
    }

    private static func locateExecutable() -> URL {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment["RESUMABLE_CLI"], !path.isEmpty { return URL(fileURLWithPath: path) }
        var candidates: [URL] = []
        if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            candidates.append(
                URL(fileURLWithPath: path).deletingLastPathComponent().appendingPathComponent("resumable"))
        }
        // On macOS the tests run inside `<bin>/ResumablePackageTests.xctest`, a bundle beside the executable.
        candidates.append(Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent("resumable"))
        for bundle in Bundle.allBundles where bundle.bundlePath.hasSuffix(".xctest") {
            candidates.append(bundle.bundleURL.deletingLastPathComponent().appendingPathComponent("resumable"))
        }
        let packageRoot = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        candidates.append(packageRoot.appendingPathComponent(".build/debug/resumable"))
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) } ?? candidates[0]
    }
}

/// Polls `condition` every 10 ms (on `Task.sleep`) until it holds or `timeout` passes; the default is generous, so
/// that only a real failure reaches it. The condition is checked once more at the end, so a wait the busy pool kept
/// from running still sees what happened meanwhile.
func eventually(
    timeout: Duration = CLIProcess.deadline, _ condition: () throws -> Bool
) async throws -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while clock.now < deadline {
        if try condition() { return true }
        try await Task.sleep(for: .milliseconds(10))
    }
    return try condition()
}
