import Foundation
import ProcessSpawning

/// Runs another process and collects its standard output; standard error is passed through.
enum ChildProcess {
    /// What a finished child produced.
    struct Output: Sendable {
        /// The child's process id.
        let pid: Int32
        /// Its exit status (or 128 + signal when a signal ended it).
        let status: Int32
        /// Everything it wrote to standard output.
        let standardOutput: Data
    }

    /// The path of the running executable, so that the tool can start another copy of itself.
    static func currentExecutable() -> URL {
        #if os(Linux)
            if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
                return URL(fileURLWithPath: path)
            }
        #endif
        if let url = Bundle.main.executableURL { return url }
        return URL(fileURLWithPath: CommandLine.arguments.first ?? "resumable")
    }

    /// Runs `executable` with `arguments` to its end.
    static func run(_ executable: URL, _ arguments: [String]) async throws -> Output {
        let pipe = Pipe()
        let process = try SpawnedProcess(
            executable: executable, arguments: arguments, standardOutput: .pipe(pipe), standardError: .inherit)
        let reader = pipe.fileHandleForReading
        let pid = process.processIdentifier
        let data = await withCheckedContinuation { (continuation: CheckedContinuation<Data, Never>) in
            DispatchQueue.global().async {
                continuation.resume(returning: reader.readDataToEndOfFile())
            }
        }
        let status = await process.exit().shellStatus
        return Output(pid: pid, status: status, standardOutput: data)
    }
}
