import Foundation
import LoopbackServer
import ProcessSpawning
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a real peer server could not be used.
struct PeerError: Error, CustomStringConvertible {
    let description: String
}

/// Where the tests run, and where the programs they start as peers are.
enum PeerEnvironment {
    /// Whether the tests run in CI (`CI=true`), where a missing peer is a failure, never a skip.
    static let isCI: Bool = {
        let value = ProcessInfo.processInfo.environment["CI"]?.lowercased() ?? ""
        return !["", "0", "false", "no"].contains(value)
    }()

    /// The executable a peer runs: the one `variable` names when it is set (a developer's override), else the
    /// first executable among `candidates`, else `name` on `PATH`; `nil` when there is none.
    static func executable(named name: String, overriddenBy variable: String, candidates: [String]) -> URL? {
        let environment = ProcessInfo.processInfo.environment
        if let override = environment[variable], !override.isEmpty {
            return FileManager.default.isExecutableFile(atPath: override) ? URL(fileURLWithPath: override) : nil
        }
        let path = (environment["PATH"] ?? "").split(separator: ":").map { "\($0)/\(name)" }
        return (candidates + path).first { FileManager.default.isExecutableFile(atPath: $0) }
            .map { URL(fileURLWithPath: $0) }
    }

    /// The error a test fails with when its peer is missing: loud, with the command that installs it.
    static func missing(_ name: String, variable: String, install: String) -> PeerError {
        PeerError(
            description: "\(name) is not installed, so the tests against it cannot run"
                + (isCI ? " and CI (CI=true) requires them" : "")
                + ". Install it with `\(install)`, or point \(variable) at the binary."
        )
    }
}

/// A server process a test started: listening on a free loopback port, ready once it served a probe file
/// from its document root, stopped with SIGTERM (SIGKILL if that is ignored) and reaped. The directory it writes
/// into is held until the process exited, so that it is removed only then: removed while the process still ran, it
/// lost the race with the files the process writes or unlinks as it exits (nginx's pid file) and part of it stayed.
///
/// The process is stopped by ``stop(signal:)`` or when the value is released. Swift may release a value
/// after its last use, before the end of its scope, so tests keep it alive with `defer { peer.stop() }`.
///
/// Nothing here blocks a thread of Swift concurrency's cooperative pool, which the whole suite shares: the
/// readiness probe runs on a thread of its own, and stopping signals at once and leaves the waiting for the exit
/// (and the reaping) to a thread of its own.
final class PeerProcess: Sendable {
    /// What the peer is, for messages.
    let name: String
    /// The loopback port the peer listens on.
    let port: UInt16
    private let process: SpawnedProcess
    private let logs: [URL]
    /// The directory the process writes into; the reaper holds it until the process exited.
    private let directory: TemporaryDirectory
    private let stopped = Mutex(false)

    private init(name: String, port: UInt16, process: SpawnedProcess, logs: [URL], directory: TemporaryDirectory) {
        self.name = name
        self.port = port
        self.process = process
        self.logs = logs
        self.directory = directory
    }

    deinit {
        stop()
    }

    /// Starts `executable` on a free loopback port and waits until it serves files from `documentRoot`.
    ///
    /// A port is chosen by binding a socket to port 0 and closing it; when the server then finds the port
    /// taken (another process won the race), it is started again on another port.
    ///
    /// - Parameters:
    ///   - directory: The directory the process writes into (its configuration, logs, temporary files); removed
    ///     only once the process exited.
    ///   - arguments: The arguments for a port; may write configuration that names the port.
    ///   - output: Where the process's standard output and error go.
    ///   - logs: Further logs to quote when the process does not start (`output` is always quoted).
    ///   - probe: Tells whether the process on a port is ready, for a peer that serves no files (a proxy); blocking,
    ///     it runs on a thread of its own. `nil`: the probe file in `documentRoot`.
    static func launch(
        name: String,
        executable: URL,
        documentRoot: URL,
        output: URL,
        logs: [URL] = [],
        probe: (@Sendable (UInt16) -> Bool)? = nil,
        directory: TemporaryDirectory,
        arguments: (UInt16) throws -> [String]
    ) async throws -> PeerProcess {
        let attempts = 5
        for attempt in 1...attempts {
            let port = try freeLoopbackPort()
            guard FileManager.default.createFile(atPath: output.path, contents: nil) else {
                throw PeerError(description: "cannot create \(output.path)")
            }
            // The child starts with no signal blocked (SpawnedProcess sees to it): the threads Swift concurrency
            // runs on block SIGTERM, and a child that inherited that would be deaf to stop(signal:).
            let handle = try FileHandle(forWritingTo: output)
            defer { try? handle.close() }  // the child has its own copy
            let process = try SpawnedProcess(
                executable: executable, arguments: try arguments(port), standardInput: .nullDevice,
                standardOutput: .handle(handle), standardError: .handle(handle))
            let peer = PeerProcess(
                name: name, port: port, process: process, logs: [output] + logs, directory: directory)
            if try await peer.waitUntilReady(documentRoot: documentRoot, probe: probe) { return peer }
            let diagnostics = peer.diagnostics()
            if attempt < attempts, diagnostics.localizedCaseInsensitiveContains("address already in use") {
                continue
            }
            throw PeerError(description: "\(name) exited before it served a file on port \(port):\n\(diagnostics)")
        }
        throw PeerError(description: "\(name) found no free port in \(attempts) attempts")
    }

    /// Sends `signal` to the process at once, without waiting: a thread of its own waits for the exit, sends
    /// SIGKILL when the process is still running after 30 s, reaps it, and only then lets go of its directory.
    ///
    /// Only the first call signals; later calls return at once.
    func stop(signal: Int32 = SIGTERM) {
        let first = stopped.withLock { stopped in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        let (process, directory) = (self.process, self.directory)
        process.send(signal)
        let reaper = Thread {
            if !Self.waitForExit(of: process, within: .seconds(30)) {
                process.send(SIGKILL)
                _ = Self.waitForExit(of: process, within: .seconds(30))
            }
            // The last reference when the peer was released: the directory goes now, with no process writing to it.
            withExtendedLifetime(directory) {}
        }
        reaper.name = "PeerProcess.reaper"
        reaper.start()
    }

    /// Whether the process is still running.
    var isRunning: Bool { process.isRunning }

    /// The process's output and logs, for failure messages.
    func diagnostics() -> String {
        logs.map { log in
            let text = (try? String(contentsOf: log, encoding: .utf8)) ?? "(unreadable)"
            return "--- \(log.lastPathComponent):\n\(text.suffix(4000))"
        }.joined(separator: "\n")
    }

    /// Polls until `process` exited; blocking, so only for a thread of its own.
    private static func waitForExit(of process: SpawnedProcess, within timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            if ContinuousClock.now >= deadline { return false }
            usleep(2000)
        }
        return true
    }

    /// Polls until the process serves a probe file with a random body (so it is this process that answers,
    /// not another that took the port), or until `custom` says it is ready; `false` when the process exited first.
    private func waitUntilReady(documentRoot: URL, probe custom: (@Sendable (UInt16) -> Bool)?) async throws -> Bool {
        let nonce = UUID().uuidString
        let probe = documentRoot.appendingPathComponent(".peer-probe-\(nonce)")
        if custom == nil { try Data(nonce.utf8).write(to: probe) }
        defer { if custom == nil { try? FileManager.default.removeItem(at: probe) } }
        let deadline = ContinuousClock.now + Waiting.deadline
        let (path, port) = ("/" + probe.lastPathComponent, self.port)
        while true {
            let lastTry = ContinuousClock.now >= deadline
            if !process.isRunning { return false }
            // A blocking request (with timeouts of its own): on a thread of its own.
            let ready = try await onOwnThread {
                custom.map { $0(port) } ?? (Self.get(path: path, port: port) == Data(nonce.utf8))
            }
            if ready { return true }
            if lastTry { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        stop(signal: SIGKILL)
        throw PeerError(
            description: "\(name) did not serve a file on port \(port) within \(Waiting.deadline):\n\(diagnostics())")
    }

    // MARK: - Sockets

    #if canImport(Glibc)
        private static let streamSocket = Int32(SOCK_STREAM.rawValue)
    #else
        private static let streamSocket = SOCK_STREAM
    #endif

    private static func loopbackAddress(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }

    /// A loopback port that was free a moment ago: bound as port 0, read back, released.
    static func freeLoopbackPort() throws -> UInt16 {
        let descriptor = socket(AF_INET, streamSocket, 0)
        guard descriptor >= 0 else { throw PeerError(description: "socket() failed: errno \(errno)") }
        defer { close(descriptor) }
        var address = loopbackAddress(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                bind(descriptor, socketAddress, length) == 0 && getsockname(descriptor, socketAddress, &length) == 0
            }
        }
        guard bound else { throw PeerError(description: "binding a loopback socket failed: errno \(errno)") }
        return UInt16(bigEndian: address.sin_port)
    }

    /// The body of a `GET` over HTTP/1.0 with a 200 answer, or `nil` (refused, another status, a timeout).
    static func get(path: String, port: UInt16) -> Data? {
        let descriptor = socket(AF_INET, streamSocket, 0)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = loopbackAddress(port: port)
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                connect(descriptor, socketAddress, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard connected else { return nil }
        let request = Array("GET \(path) HTTP/1.0\r\nHost: 127.0.0.1:\(port)\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ send(descriptor, $0.baseAddress, $0.count, 0) }) == request.count else {
            return nil
        }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while response.count < 65536 {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count < 0 { return nil }
            if count == 0 { break }
            response += buffer[0..<count]
        }
        let separator = Array("\r\n\r\n".utf8)
        guard let end = (0..<max(response.count - 3, 0)).first(where: { Array(response[$0..<$0 + 4]) == separator }),
            let statusLine = String(bytes: response.prefix(while: { $0 != 13 }), encoding: .utf8),
            statusLine.split(separator: " ").dropFirst().first == "200"
        else { return nil }
        return Data(response[(end + 4)...])
    }
}

/// Files in a peer's document root.
enum PeerFiles {
    /// Writes `bytes` to `path` under `root`, creating directories, and replaces any file there atomically
    /// (a new inode, as a deploy would): a sibling is written, given its modification date, and renamed.
    @discardableResult
    static func write(_ bytes: Data, to path: String, in root: URL, modified: Date? = nil) throws -> URL {
        let file = root.appendingPathComponent(path.hasPrefix("/") ? String(path.dropFirst()) : path)
        try FileManager.default.createDirectory(
            at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        let sibling = file.deletingLastPathComponent().appendingPathComponent(".\(UUID().uuidString).partial")
        try bytes.write(to: sibling)
        if let modified {
            try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: sibling.path)
        }
        guard rename(sibling.path, file.path) == 0 else {
            throw PeerError(description: "renaming \(sibling.path) to \(file.path) failed: errno \(errno)")
        }
        return file
    }
}
