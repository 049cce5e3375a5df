import Foundation
import LoopbackServer
import Resumable

/// `resumable demo`: pauses a download in this process and finishes it in another, then verifies the file.
struct DemoCommand: CLICommand {
    static let spec = CommandSpec(
        name: "demo",
        abstract: "Pause a download here, finish it in a second process, and verify the file (a few seconds).",
        arguments: [
            .flag("keep", help: "Keep the demo's temporary directory instead of removing it.")
        ],
        discussion: """
            Creates a 32 MiB file of deterministic pseudo-random bytes in a fresh temporary directory, serves it \
            on 127.0.0.1 throttled to 16 MiB/s, starts downloading it in this process, pauses once half is on \
            disk, writes the resume token, and runs 'resumable resume <token> --quiet --json' as a separate \
            process. Exits with 0 only when the finished file's SHA-256 equals the source's.
            """
    )

    private static let size: Int64 = 32 << 20
    private static let rate = 16 << 20
    private static let seed: UInt64 = 0x5245_5355_4d41_424c

    /// `--keep`.
    let keep: Bool

    init(arguments: ParsedArguments) throws(UsageError) {
        keep = arguments.flag("keep")
    }

    /// A failed step of the demo.
    private struct DemoFailure: Error {
        let message: String
    }

    func run() async -> ExitCode {
        let root = FileManager.default.temporaryDirectory
            .appendingPathComponent("resumable-demo-\(UUID().uuidString.lowercased())", isDirectory: true)
        defer {
            if keep {
                Console.out("Kept \(root.path).")
            } else {
                try? FileManager.default.removeItem(at: root)
            }
        }
        do {
            try await demo(in: root)
            return .success
        } catch let failure as DemoFailure {
            Console.err("demo failed: \(failure.message)")
        } catch {
            Console.err("demo failed: \(error)")
        }
        return .failure
    }

    private func demo(in root: URL) async throws {
        let served = root.appendingPathComponent("served", isDirectory: true)
        let downloads = root.appendingPathComponent("downloads", isDirectory: true)
        try FileManager.default.createDirectory(at: served, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: downloads, withIntermediateDirectories: true)
        Console.out("Resumable demo: a download paused in this process and finished by another.\n")

        let source = served.appendingPathComponent("demo.bin")
        try Data(Resource.generatedBytes(seed: Self.seed, range: 0..<Self.size)).write(to: source)
        let sourceHash = try PortableSHA256.hex(ofFileAt: source)
        Console.out("1. Created \(ByteFormat.size(Self.size)) of pseudo-random bytes: \(source.path)")
        Console.out("   SHA-256 \(sourceHash)")

        let server = try LoopbackServer(configuration: .init(throttleBytesPerSecond: Self.rate))
        defer { server.shutdown() }
        server.serveFiles(from: served)
        let url = server.url(for: "/demo.bin")
        Console.out("2. Serving it at \(url.absoluteString), throttled to \(ByteFormat.rate(Double(Self.rate)))")

        Console.out("3. Downloading into \(downloads.path)/ in this process (pid \(getpid()))")
        let token = try await downloadHalf(url, into: downloads)
        let onDisk = token.offset + token.completedRanges.reduce(0) { $0 + $1.upperBound - $1.lowerBound }
        let percent = ByteFormat.precisePercent(onDisk, of: Self.size)
        Console.out(
            "   Paused with \(onDisk) of \(Self.size) bytes on disk (\(percent)) with cancelProducingResumeData()")
        if !token.completedRanges.isEmpty {
            Console.out(
                "   Several connections were at work: bytes 0..<\(token.offset) and \(token.completedRanges.count) more "
                    + "ranges are done (token version 2); the resume fetches only the gaps")
        }
        Console.out("   The partial file stays on disk: \(token.tempPath)")

        let tokenURL = TokenFile.defaultURL(for: token)
        try token.write(to: tokenURL)
        Console.out("4. Wrote the resume token to \(tokenURL.path):")
        Console.out(String(decoding: token.jsonData(), as: UTF8.self))

        let executable = ChildProcess.currentExecutable()
        let arguments = ["resume", tokenURL.path, "--quiet", "--json"]
        Console.out("5. Running \(([executable.path] + arguments).map(ByteFormat.shellQuoted).joined(separator: " "))")
        let child = try await ChildProcess.run(executable, arguments)
        let reported = String(decoding: child.standardOutput, as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        Console.out("   Child process \(child.pid) exited with \(child.status) and printed:")
        Console.out("   \(reported)")
        guard child.status == 0 else { throw DemoFailure(message: "the resuming process exited with \(child.status)") }
        let result = try ChildResult(json: child.standardOutput)
        Console.out("   It resumed at byte \(result.resumedFrom) and transferred \(result.bytesTransferred) bytes.")

        let finalHash = try PortableSHA256.hex(ofFileAt: URL(fileURLWithPath: result.path))
        Console.out("6. Verifying \(result.path)")
        Console.out("   Bytes before the pause:  \(onDisk)")
        Console.out("   Resumed at offset:       \(result.resumedFrom)")
        Console.out("   Bytes after the pause:   \(result.bytesTransferred)")
        Console.out("   Size:                    \(result.bytes) (source: \(Self.size))")
        Console.out("   SHA-256:                 \(finalHash)")
        guard result.resumedFrom == token.offset, onDisk + result.bytesTransferred == Self.size,
            result.bytes == Self.size
        else {
            throw DemoFailure(message: "the resume did not continue exactly where the pause stopped")
        }
        guard finalHash == sourceHash else {
            throw DemoFailure(message: "SHA-256 \(finalHash) differs from the source's \(sourceHash)")
        }
        guard !FileManager.default.fileExists(atPath: tokenURL.path),
            !FileManager.default.fileExists(atPath: token.tempPath)
        else {
            throw DemoFailure(message: "the token or the partial file was left behind after success")
        }
        Console.out("   Verified: identical to the source; the token and the partial file are gone.")
    }

    /// Starts the download and pauses it once at least half the file is on disk.
    private func downloadHalf(_ url: URL, into directory: URL) async throws -> ResumeToken {
        let task = try DownloadTask(url: url, destination: .directory(directory))
        for await event in task.events {
            if case .progress(let progress) = event, progress.bytesOnDisk >= Self.size / 2 { break }
        }
        guard let token = await task.cancelProducingResumeData() else {
            if case .failure(let error) = await task.result {
                throw DemoFailure(message: "the download failed before it could be paused: \(error)")
            }
            throw DemoFailure(message: "the download finished before it could be paused")
        }
        return token
    }

    /// The fields of the child's final JSON object that the demo checks.
    private struct ChildResult: Decodable {
        let status: String
        let path: String
        let bytes: Int64
        let sha256: String?
        let resumedFrom: Int64
        let bytesTransferred: Int64

        init(json: Data) throws {
            do {
                self = try JSONDecoder().decode(ChildResult.self, from: json)
            } catch {
                throw DemoFailure(message: "cannot read the resuming process's result: \(error)")
            }
            guard status == "completed" else { throw DemoFailure(message: "the resume ended as '\(status)'") }
        }
    }
}
