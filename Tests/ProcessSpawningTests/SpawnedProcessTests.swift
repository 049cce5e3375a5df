import Foundation
import ProcessSpawning
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("Child processes started with posix_spawn")
struct SpawnedProcessTests {
    private let shell = URL(fileURLWithPath: "/bin/sh")

    /// Runs `body` on a thread of its own (the spawning and waiting below block).
    private func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }

    @Test("Exit status, standard output and standard input")
    func exitStatusAndStreams() async throws {
        let (termination, output) = try await onThread {
            try SpawnedProcess.run(
                executable: shell, arguments: ["-c", "tr a-z A-Z; exit 3"], input: Data("hello".utf8))
        }
        #expect(termination == .exited(3))
        #expect(termination.exitStatus == 3 && termination.signal == nil && termination.shellStatus == 3)
        #expect(String(decoding: output, as: UTF8.self) == "HELLO")
    }

    @Test("A signal that ends the child is reported as such")
    func signaled() async throws {
        let termination = try await onThread {
            try SpawnedProcess.run(executable: shell, arguments: ["-c", "kill -TERM $$; sleep 5"]).termination
        }
        #expect(termination == .signaled(SIGTERM))
        #expect(termination.shellStatus == 128 + SIGTERM && termination.exitStatus == nil)
    }

    @Test("The environment and the directory are the ones given")
    func environmentAndDirectory() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("spawn-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let output = try await onThread {
            try SpawnedProcess.run(
                executable: shell, arguments: ["-c", "echo \"$ONLY|$HOME\"; pwd -P"], environment: ["ONLY": "this"],
                currentDirectory: directory
            ).output
        }
        let expectedDirectory = directory.resolvingSymlinksInPath().path
        #expect(String(decoding: output, as: UTF8.self) == "this|\n\(expectedDirectory)\n")
    }

    @Test("No descriptor of the parent but the standard three reaches the child, close-on-exec or not")
    func descriptorsAreClosed() async throws {
        // Opened without O_CLOEXEC, as a leaked socket would be, at a number no shell uses.
        let opened = open("/dev/null", O_RDONLY)
        try #require(opened >= 0)
        // The lowest free number from 900 on: `dup2` onto a fixed number would silently close whatever another test
        // of this process has open there (seen: a download's temporary file became /dev/null, and its ftruncate
        // failed with EINVAL).
        let descriptor = fcntl(opened, F_DUPFD, 900)
        close(opened)
        try #require(descriptor >= 900)
        defer { close(descriptor) }
        let output = try await onThread {
            try SpawnedProcess.run(
                executable: shell, arguments: ["-c", "for f in /proc/$$/fd/*; do echo ${f##*/}; done"]
            ).output
        }
        let open = String(decoding: output, as: UTF8.self).split(separator: "\n").compactMap { Int($0) }
        #expect(open.contains(1))
        // 3 is the shell's own handle on the directory it lists.
        #expect(open.allSatisfy { $0 <= 3 }, "the child has \(open.sorted())")
    }

    @Test("The child starts with no signal blocked and no standard signal ignored, whatever the parent blocks")
    func signalsAreReset() async throws {
        let status = try await onThread { () throws -> String in
            var blocked = sigset_t()
            var saved = sigset_t()
            sigemptyset(&blocked)
            sigaddset(&blocked, SIGTERM)
            sigaddset(&blocked, SIGINT)
            pthread_sigmask(SIG_BLOCK, &blocked, &saved)
            defer { pthread_sigmask(SIG_SETMASK, &saved, nil) }
            let output = try SpawnedProcess.run(
                executable: URL(fileURLWithPath: "/bin/cat"), arguments: ["/proc/self/status"]
            ).output
            return String(decoding: output, as: UTF8.self)
        }
        let fields = Dictionary(
            status.split(separator: "\n").compactMap { line -> (String, String)? in
                let parts = line.split(separator: ":", maxSplits: 1)
                guard parts.count == 2 else { return nil }
                return (String(parts[0]), parts[1].trimmingCharacters(in: .whitespaces))
            }, uniquingKeysWith: { first, _ in first })
        #expect(fields["SigBlk"] == "0000000000000000", "\(status)")
        // Signals 1–31; glibc keeps its own two real-time signals (32 and 33) as they are in the parent.
        let ignored = fields["SigIgn"].flatMap { UInt64($0, radix: 16) }
        #expect(ignored.map { $0 & 0x7FFF_FFFF } == 0, "\(status)")
    }

    @Test("A missing executable is a thrown error, not a crash or a child that exits 127")
    func missingExecutable() {
        #expect(throws: SpawnedProcess.SpawnError.self) {
            try SpawnedProcess(executable: URL(fileURLWithPath: "/nonexistent/\(UUID().uuidString)"))
        }
    }

    /// swift-corelibs-foundation's `Process.run()` crashed now and then when many descriptors were open
    /// (swiftlang/swift-corelibs-foundation#5472); this is that situation, from several threads at once.
    @Test("Hundreds of children started from several threads while a thousand descriptors are open")
    func manyChildrenManyDescriptors() async throws {
        let descriptors = (0..<1000).map { _ in open("/dev/null", O_RDONLY) }
        defer { descriptors.filter { $0 >= 0 }.forEach { close($0) } }
        try #require(descriptors.allSatisfy { $0 >= 0 })
        let statuses = try await withThrowingTaskGroup(of: [SpawnedProcess.Termination].self) { group in
            for thread in 0..<8 {
                group.addTask {
                    try await onThread {
                        try (0..<25).map { index in
                            try SpawnedProcess.run(
                                executable: shell, arguments: ["-c", "exit \((thread * 25 + index) % 100)"]
                            ).termination
                        }
                    }
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(statuses.count == 200)
        #expect(Set(statuses) == Set((0..<100).map { SpawnedProcess.Termination.exited(Int32($0)) }))
    }

    @Test("Threads that poll and one that waits all see the same end, and the child is reaped once")
    func concurrentWaiters() async throws {
        let input = Pipe()
        let process = try SpawnedProcess(
            executable: shell, arguments: ["-c", "read line; exit 7"], standardInput: .pipe(input),
            standardOutput: .nullDevice)
        #expect(process.isRunning)
        #expect(process.termination == nil)
        async let waited = onThread { process.waitUntilExit() }
        async let polled = onThread { () -> SpawnedProcess.Termination in
            while true {
                if let termination = process.termination { return termination }
                usleep(100)
            }
        }
        try input.fileHandleForWriting.write(contentsOf: Data("go\n".utf8))
        try input.fileHandleForWriting.close()
        let (first, second) = try await (waited, polled)
        let third = await process.exit()
        #expect(first == .exited(7) && second == .exited(7) && third == .exited(7))
        #expect(!process.isRunning)
        // Reaped: the process id is no longer a child of this process.
        #expect(waitpid(process.processIdentifier, nil, WNOHANG) == -1 && errno == ECHILD)
    }

    @Test("send delivers a signal to a running child; once it is reaped, send does nothing")
    func sendSignal() async throws {
        let process = try SpawnedProcess(executable: shell, arguments: ["-c", "exec sleep 30"])
        process.send(SIGKILL)
        #expect(await process.exit() == .signaled(SIGKILL))
        process.send(SIGKILL)  // reaped: must not signal whatever process has that id now
        #expect(process.termination == .signaled(SIGKILL))
    }
}
