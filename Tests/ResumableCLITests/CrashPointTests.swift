import Foundation
import LoopbackServer
import ProcessSpawning
import Resumable
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Crash-point enumeration, in the manner of SQLite's crash tests and the ALICE study (OSDI '14).
///
/// A debug build of `resumable` numbers every durable step it takes (create, write, flush, flush-directory, truncate, token-write,
/// rename, link, unlink; `DurableSteps`): `RESUMABLE_STEP_LOG` lists them, `RESUMABLE_CRASH_AFTER_STEP=k` ends the
/// process with `_exit(137)` right after step k, as `kill -9` would. Each test records the steps of one run, then
/// for every k re-creates the state before the run (a snapshot of the scratch directory), crashes the run after
/// step k, checks what is on disk, and resumes what is there in a fresh process twice: with the server serving the
/// version the crashed run was fetching, and with the other version ("the old version is back").
///
/// Every outcome must be a finished file byte-identical to the server's current version, or a clear error (exit 65
/// or 75 with a message; exit 1 for a gzip answer, which the engine refuses, keeping the partial file): never a spliced file, never a second copy (`file (1).bin`), never a byte outside the
/// scratch directory, never a byte downloaded again that a token on disk covered. The finishing window must be hit
/// by every test: after the last token write (the file is complete: a resume asks only `bytes=<length>-` and
/// finishes the same file), after the rename and after the token file's removal (a resume says "already finished",
/// exit 65 `tokenGone`, with no request). Nothing waits on timing: the first download of A ends where the server
/// drops the connection, at a known byte count, and the crash points are counted steps.
@Suite("crash points: a crash after every durable step, then a resume")
struct CrashPointTests {
    @Test("get: a crash after each step of a fresh download, then a resume with the same or a changed version")
    func freshGet() async throws {
        let lab = try CrashLab(name: "get")
        let empty = try lab.snapshot()
        let summary = try await lab.enumerate(
            from: empty, serving: .plain(.a), finishing: .a,
            arguments: ["get", lab.url, "--token", lab.tokenPath, "-q"]
        )
        summary.report()
    }

    @Test("resume of the same version: a crash after each step of the 206 join, then a resume with it or a new one")
    func join() async throws {
        let lab = try CrashLab(name: "206 join")
        let interrupted = try await lab.interruptVersionA()
        let summary = try await lab.enumerate(
            from: interrupted, serving: .plain(.a), finishing: .a, arguments: ["resume", lab.tokenPath, "-q"])
        summary.report()
    }

    @Test(
        "resume answered with a new version: a crash after each step of the restart, then a resume with the new or the old version",
        arguments: CrashRestartAnswer.allCases)
    func restart(answer: CrashRestartAnswer) async throws {
        let lab = try CrashLab(name: answer.rawValue)
        let interrupted = try await lab.interruptVersionA()
        let summary = try await lab.enumerate(
            from: interrupted, serving: answer.serving, finishing: answer == .gzip200 ? nil : .b,
            arguments: ["resume", lab.tokenPath, "-q"], expectsRestart: true)
        summary.report()
    }
}

/// How the server answers the resume of a download of version A once it serves version B.
enum CrashRestartAnswer: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// `If-Range` does not match: 200 with the whole of B and a new ETag.
    case whole200 = "200 with a new ETag"
    /// The server ignores `If-Range`: a 206 of B with a changed ETag, which cannot be joined; then B from byte 0.
    case changed206 = "206 with a changed ETag"
    /// 200 of B with `Content-Encoding: gzip` although the request said `Accept-Encoding: identity` (the reported
    /// reproduction of the original bug). The engine refuses such an answer (exit 1, `protocolViolation`): the run
    /// never finishes, and the partial download of A and its token must come through every crash intact.
    case gzip200 = "200 gzip despite identity"
    /// 200 of B cut off mid-body, retried and joined with a 206 of B: B's own tokens then cover bytes of B.
    case cutThenJoined = "200 cut mid-body, then a 206 join"

    var testDescription: String { rawValue }

    /// What the server serves while the restart runs.
    var serving: CrashServing {
        switch self {
        case .whole200: return .plain(.b)
        case .changed206: return .ignoringIfRange(.b)
        case .gzip200: return .gzipped(.b)
        case .cutThenJoined: return .cutOnce(.b, after: CrashLab.cutPoint)
        }
    }
}

/// One version of the file on the server. Both have the same length, so only the bytes tell a splice.
struct CrashVersion: Sendable, Equatable {
    let name: String
    let bytes: [UInt8]
    let etag: String
    let lastModified: String

    static let length: Int64 = 48 * 1024
    static let a = CrashVersion(name: "A", seed: 11, lastModified: "Mon, 02 Nov 2020 10:00:00 GMT")
    static let b = CrashVersion(name: "B", seed: 22, lastModified: "Tue, 03 Nov 2020 10:00:00 GMT")
    static let all = [a, b]

    private init(name: String, seed: UInt64, lastModified: String) {
        self.name = name
        self.bytes = Resource.generatedBytes(seed: seed, range: 0..<Self.length)
        self.etag = "\"version-\(name)\""
        self.lastModified = lastModified
    }

    static func == (left: CrashVersion, right: CrashVersion) -> Bool { left.name == right.name }

    /// The version whose ETag is `etag`.
    static func tagged(_ etag: String?) -> CrashVersion? { all.first { $0.etag == etag } }

    /// Whether `data` is a prefix of this version (an empty file is a prefix of every version).
    func hasPrefix(_ data: Data) -> Bool {
        data.count <= bytes.count && data.elementsEqual(bytes[0..<data.count])
    }

    /// This version's bytes gzip-compressed (stored deflate blocks), as a misbehaving server sends them.
    var gzipped: [UInt8] { CrashGzip.encode(bytes) }
}

/// How the server serves the file.
enum CrashServing: Sendable {
    /// A correct server.
    case plain(CrashVersion)
    /// A server that answers ranges even when `If-Range` does not match.
    case ignoringIfRange(CrashVersion)
    /// A server that gzips every answer whatever `Accept-Encoding` says (and so never answers a range).
    case gzipped(CrashVersion)
    /// A correct server whose first answer is cut off after `after` body bytes.
    case cutOnce(CrashVersion, after: Int64)

    var version: CrashVersion {
        switch self {
        case .plain(let version), .ignoringIfRange(let version), .gzipped(let version), .cutOnce(let version, _):
            return version
        }
    }

    /// The same version, served as a correct server would, except for a server that cannot help gzipping.
    var steady: CrashServing {
        switch self {
        case .cutOnce(let version, _): return .plain(version)
        default: return self
        }
    }

    /// Served by a correct server that keeps what it serves for the same version (for "the old version is back").
    static func back(_ version: CrashVersion, like other: CrashServing) -> CrashServing {
        switch other {
        case .ignoringIfRange: return .ignoringIfRange(version)
        default: return .plain(version)
        }
    }

    var isGzipped: Bool {
        if case .gzipped = self { return true }
        return false
    }
}

/// A step the `resumable` process recorded: `N kind path`.
struct CrashStep: Sendable, CustomStringConvertible {
    let number: Int
    let kind: String
    let path: String

    var description: String { "\(number) \(kind) \((path as NSString).lastPathComponent)" }
}

/// What a resume from a crashed state came to.
enum CrashOutcome: String, Sendable {
    case finished = "finished"
    case finishedWithDestination = "finished with -o"
    case alreadyFinished = "tokenGone (65)"
    case refused = "gzip refused (1)"
    case failed = "another error"
}

/// Counts for the report.
struct CrashSummary {
    let name: String
    var dryRunSteps: [CrashStep] = []
    var crashPoints = 0
    var pastTheEnd = 0
    var resumes = 0
    var outcomes: [String: Int] = [:]
    var finishingWindow: Set<String> = []
    var strayPartials = 0
    var coveredChecks = 0
    let started = ContinuousClock.now

    func report() {
        let kinds = dryRunSteps.map(\.kind).joined(separator: " ")
        let outcomeText = outcomes.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ")
        print(
            "crash points [\(name)]: \(dryRunSteps.count) steps (\(kinds)); \(crashPoints) crash points + "
                + "\(pastTheEnd) past the end; \(resumes) resumes (\(outcomeText)); finishing window hit: "
                + "\(finishingWindow.sorted()); token-covered resumes checked: \(coveredChecks); stray partial files "
                + "left by crashes: \(strayPartials); \(ContinuousClock.now - started)")
    }
}

/// A server, a scratch directory and the machinery to crash `resumable` after any step and look at what is left.
final class CrashLab {
    static let pausePoint: Int64 = 20_000
    static let cutPoint: Int64 = 30_000

    let name: String
    let server: LoopbackServer
    let path = "/file.bin"
    /// Holds only `work`: anything else appearing here is a byte outside the scratch directory.
    let root: ScratchDirectory
    /// The download's directory (and the processes' working directory).
    let work: URL
    /// Step logs and process output, outside `root`.
    let logs: ScratchDirectory
    private var runs = 0

    init(name: String) throws {
        self.name = name
        server = try LoopbackServer()
        root = try ScratchDirectory()
        work = try root.subdirectory("work")
        logs = try ScratchDirectory()
        serve(.plain(.a))
    }

    var url: String { server.url(for: path).absoluteString }
    var tokenURL: URL { work.appendingPathComponent("T.json") }
    var tokenPath: String { tokenURL.path }
    var finalURL: URL { work.appendingPathComponent("file.bin") }

    // MARK: - The server

    func serve(_ serving: CrashServing) {
        server.clearQueue(for: path)
        let version = serving.version
        var behavior = Behavior.normal
        if case .ignoringIfRange = serving { behavior.ignoreIfRange = true }
        server.register(
            .bytes(version.bytes, etag: version.etag, lastModified: version.lastModified, behavior: behavior), at: path)
        switch serving {
        case .gzipped(let version):
            let body = version.gzipped
            let response = ScriptedResponse(
                status: 200,
                headers: [
                    HeaderField("Content-Type", "application/octet-stream"), HeaderField("Content-Encoding", "gzip"),
                    HeaderField("Content-Length", String(body.count)), HeaderField("ETag", version.etag),
                    HeaderField("Last-Modified", version.lastModified), HeaderField("Vary", "Accept-Encoding"),
                ],
                body: body)
            for _ in 0..<6 { server.enqueue(response, for: path) }
        case .cutOnce(_, let after):
            server.enqueue(behavior: Behavior(dropAfterBytes: after), for: path)
        case .plain, .ignoringIfRange:
            break
        }
    }

    /// The `Range` headers of the requests for the file since the last ``serve(_:)``-and-clear.
    var ranges: [String?] { server.requests(for: path).map { $0.header("Range") } }

    // MARK: - Processes

    /// Runs `resumable` to its end with extra environment variables; output goes to files beside the step logs.
    func run(_ arguments: [String], crashAfter: Int? = nil, logSteps: Bool = true) async throws -> (
        CLIResult, [CrashStep]
    ) {
        runs += 1
        let base = logs.file("run-\(runs)")
        let logURL = base.appendingPathExtension("steps")
        var environment = ProcessInfo.processInfo.environment
        environment["RESUMABLE_STEP_LOG"] = nil
        environment["RESUMABLE_CRASH_AFTER_STEP"] = nil
        if logSteps || crashAfter != nil { environment["RESUMABLE_STEP_LOG"] = logURL.path }
        if let crashAfter { environment["RESUMABLE_CRASH_AFTER_STEP"] = String(crashAfter) }
        let result = try await Self.runProcess(
            arguments, in: work, environment: environment, output: base)
        let steps = Self.parseSteps(at: logURL)
        return (result, steps)
    }

    private static func runProcess(
        _ arguments: [String], in directory: URL, environment: [String: String], output base: URL
    ) async throws -> CLIResult {
        let stdoutURL = base.appendingPathExtension("out")
        let stderrURL = base.appendingPathExtension("err")
        _ = FileManager.default.createFile(atPath: stdoutURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
        let stdout = try FileHandle(forWritingTo: stdoutURL)
        let stderr = try FileHandle(forWritingTo: stderrURL)
        let process = try SpawnedProcess(
            executable: CLIProcess.executable,
            arguments: arguments,
            environment: environment,
            currentDirectory: directory,
            standardInput: .nullDevice,
            standardOutput: .handle(stdout),
            standardError: .handle(stderr)
        )
        try? stdout.close()
        try? stderr.close()
        let watchdog = Task {
            try await Task.sleep(for: CLIProcess.deadline)
            process.send(SIGKILL)
        }
        let termination = await process.exit()
        watchdog.cancel()
        if termination == .signaled(SIGKILL) {
            Issue.record("resumable \(arguments) did not finish within \(CLIProcess.deadline)")
        }
        return CLIResult(
            exitCode: termination.exitStatus,
            signal: termination.signal,
            stdout: (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? ""
        )
    }

    private static func parseSteps(at url: URL) -> [CrashStep] {
        guard let text = try? String(contentsOf: url, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ", maxSplits: 2).map(String.init)
            guard fields.count == 3, let number = Int(fields[0]) else { return nil }
            return CrashStep(number: number, kind: fields[1], path: fields[2])
        }.sorted { $0.number < $1.number }
    }

    // MARK: - The disk

    /// The files of `work`, by name, with their modes.
    struct DiskState {
        var files: [String: (data: Data, mode: Int)]
    }

    func snapshot() throws -> DiskState {
        var files: [String: (data: Data, mode: Int)] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: work.path) {
            let file = work.appendingPathComponent(name)
            let attributes = try FileManager.default.attributesOfItem(atPath: file.path)
            guard attributes[.type] as? FileAttributeType == .typeRegular else {
                Issue.record("[\(name)] not a regular file in the scratch directory: \(name)")
                continue
            }
            let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue ?? 0o600
            files[name] = (try Data(contentsOf: file), mode)
        }
        return DiskState(files: files)
    }

    /// Makes `work` hold exactly `state`: same names (the token names its temporary file by absolute path), same
    /// bytes, same modes, one link each, owned by this user.
    func restore(_ state: DiskState) throws {
        for name in try FileManager.default.contentsOfDirectory(atPath: work.path) {
            try FileManager.default.removeItem(at: work.appendingPathComponent(name))
        }
        for (name, file) in state.files {
            let url = work.appendingPathComponent(name)
            try file.data.write(to: url)
            try FileManager.default.setAttributes([.posixPermissions: file.mode], ofItemAtPath: url.path)
        }
    }

    func partialFiles() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: work.path)) ?? [])
            .filter { $0.hasPrefix(".resumable-") && $0.hasSuffix(".partial") }.sorted()
    }

    func token() -> ResumeToken? { try? ResumeToken(contentsOf: tokenURL) }

    // MARK: - Step 1: a download of A interrupted after `pausePoint` bytes

    /// Downloads A with `get` until the server drops the connection after ``pausePoint`` bytes; with no retries
    /// the process flushes the file, writes a token for those bytes and exits with 75. Returns the state on disk.
    ///
    /// This leaves on disk what a pause by SIGINT leaves (a flushed temporary file and a token for all of it), but
    /// with no signal: the CLI's `SignalWatcher` (a `DispatchSourceSignal`) loses an occasional SIGINT on Linux, and
    /// a lost pause would make this test hang, not fail (`SignalTests` is where signals are tested).
    func interruptVersionA() async throws -> DiskState {
        serve(.plain(.a))
        server.enqueue(behavior: Behavior(dropAfterBytes: Self.pausePoint), for: path)
        let (interrupted, _) = try await run(["get", url, "--token", tokenPath, "--retries", "0", "-q"])
        #expect(interrupted.exitCode == 75, "[\(name)] \(interrupted)")
        let token = try #require(self.token(), "[\(name)] no token after the interruption")
        #expect(token.offset == Self.pausePoint && token.etag == CrashVersion.a.etag, "[\(name)] \(token)")
        let partials = partialFiles()
        #expect(partials.count == 1 && token.tempPath == work.appendingPathComponent(partials[0]).path)
        let size = (try? FileManager.default.attributesOfItem(atPath: token.tempPath)[.size] as? NSNumber)?.int64Value
        #expect(size == Self.pausePoint, "[\(name)] the temporary file holds \(size ?? -1) bytes")
        serve(.plain(.a))
        return try snapshot()
    }

    // MARK: - Steps 2 and 3: record the steps of a run, then crash it after each one

    /// Runs `arguments` once from `start` to count its steps, then for every step k re-creates `start`, crashes
    /// the run after step k, checks the disk, and resumes from it with `serving`'s version and with the other one.
    /// `finishing` is the version the run finishes with; `nil` when the server's answer is refused (exit 1).
    func enumerate(
        from start: DiskState, serving: CrashServing, finishing: CrashVersion?, arguments: [String],
        expectsRestart: Bool = false
    ) async throws -> CrashSummary {
        var summary = CrashSummary(name: name)
        try restore(start)
        serve(serving)
        let coveredAtStart = coverage()
        let (dry, steps) = try await run(arguments)
        if let finishing {
            #expect(dry.exitCode == 0, "[\(name)] the dry run: \(dry)")
            try expectSameBytes(Data(contentsOf: finalURL), Data(finishing.bytes), "[\(name)] the dry run's file")
            if expectsRestart {
                #expect(
                    steps.contains { $0.kind == "create" }, "[\(name)] the restart did not start a new file: \(steps)")
            }
        } else {
            #expect(dry.exitCode == 1 && dry.stderr.contains("encoded"), "[\(name)] the dry run: \(dry)")
            #expect(!FileManager.default.fileExists(atPath: finalURL.path), "[\(name)] the dry run saved a file")
            #expect(coverage() >= coveredAtStart, "[\(name)] the refusal lost bytes the token covered")
        }
        #expect(!steps.isEmpty, "[\(name)] no steps recorded: is this a debug build?")
        summary.dryRunSteps = steps
        let fetched = serving.version
        let other = try #require(CrashVersion.all.first { $0 != fetched })

        // One crash after step k of a fresh run from `start`, the disk checked, and resumes from there with both versions.
        // Returns whether the run crashed (false: it ended by itself before step k).
        func crash(after k: Int) async throws -> Bool {
            try restore(start)
            serve(serving)
            let (crashed, crashSteps) = try await run(arguments, crashAfter: k)
            let step = crashSteps.first { $0.number == k }
            let label = "[\(name)] crash after step \(k) (\(step?.description ?? "past the end"))"
            if step != nil {
                #expect(crashed.exitCode == 137, "\(label): \(crashed)")
                summary.crashPoints += 1
            } else {
                #expect(crashed.exitCode == (finishing == nil ? 1 : 0), "\(label): \(crashed)")
                summary.pastTheEnd += 1
            }
            try checkDisk(label)
            let window = finishingWindow(step, finishing: finishing)
            if let window { summary.finishingWindow.insert(window) }
            let crashedState = try snapshot()
            summary.strayPartials += strayPartials()

            for version in [fetched, other] {
                try restore(crashedState)
                let steady = version == serving.version ? serving.steady : CrashServing.back(version, like: serving)
                let outcome = try await resume(
                    serving: steady, label: "\(label), resumed serving \(version.name)", window: window,
                    finishing: finishing, summary: &summary)
                summary.resumes += 1
                summary.outcomes[outcome.rawValue, default: 0] += 1
            }
            return step != nil
        }

        // The number of `write` steps depends on how the body arrives, and a token that lists no byte is written by
        // another thread whenever it gets there, so a run may number its steps differently from the dry run: go on
        // until two runs in a row ended by themselves, past the dry run's end.
        var k = 0
        var endedInARow = 0
        while k < steps.count + 2 || endedInARow < 2 {
            k += 1
            guard k <= 3 * steps.count + 10 else {
                Issue.record("[\(name)] runs keep taking more steps: \(k)")
                break
            }
            endedInARow = try await crash(after: k) ? 0 : endedInARow + 1
        }
        // For the same reason a finishing step can fall between two numbers in every run that aims at it: the last
        // steps are tried again (a few rounds at most) until each finishing window was hit.
        var rounds = 0
        while finishing != nil, summary.finishingWindow.count < 3, rounds < 6 {
            rounds += 1
            for k in max(1, steps.count - 5)...(steps.count + 1) { _ = try await crash(after: k) }
        }
        if finishing != nil {
            #expect(
                summary.finishingWindow == ["final token written", "renamed", "token removed"],
                "[\(name)] the finishing window was not covered: \(summary.finishingWindow)")
        }
        return summary
    }

    /// Which point of the finishing window a crash after `step` left, judged from the disk.
    private func finishingWindow(_ step: CrashStep?, finishing: CrashVersion?) -> String? {
        guard let step, let finishing else { return nil }
        if step.kind == "rename" { return "renamed" }
        if step.kind == "unlink" && step.path == tokenPath { return "token removed" }
        if step.kind == "token-write", let token = token(), token.offset == token.expectedLength,
            token.etag == finishing.etag
        {
            return "final token written"
        }
        return nil
    }

    /// How many bytes the token on disk covers, when its temporary file holds them as a prefix of its version.
    private func coverage() -> Int64 {
        guard let token = token(), let version = CrashVersion.tagged(token.etag),
            let data = try? Data(contentsOf: URL(fileURLWithPath: token.tempPath)), data.count >= token.offset,
            version.hasPrefix(data.prefix(Int(token.offset)))
        else { return 0 }
        return token.offset
    }

    /// The partial files no token names.
    private func strayPartials() -> Int {
        let named = token().map { ($0.tempPath as NSString).lastPathComponent }
        return partialFiles().filter { $0 != named }.count
    }

    /// What must hold on disk at any moment: only `work` in the scratch directory, no second copy, a finished file
    /// that is a whole version, partial files that are each a prefix of one version, and a token that describes a
    /// prefix of the file it names (or says complete once that file was moved into place).
    private func checkDisk(_ label: String) throws {
        #expect(root.contents() == ["work"], "\(label): bytes outside the scratch directory: \(root.contents())")
        let names = try FileManager.default.contentsOfDirectory(atPath: work.path)
        let visible = names.filter { !$0.hasPrefix(".") }.sorted()
        #expect(
            // `T.json.writing`: a token write cut short by the crash (on the checkpoint thread), replaced by the
            // next token write.
            visible.allSatisfy { ["file.bin", "T.json", "T.json.writing"].contains($0) },
            "\(label): an unexpected file (a second copy?): \(visible)")
        if let data = try? Data(contentsOf: finalURL) {
            #expect(
                CrashVersion.all.contains { Data($0.bytes) == data },
                "\(label): file.bin is not a whole version (\(data.count) bytes): a splice")
        }
        for name in partialFiles() {
            let data = try Data(contentsOf: work.appendingPathComponent(name))
            #expect(
                CrashVersion.all.contains { $0.hasPrefix(data) }, "\(label): \(name) (\(data.count) bytes) is spliced")
        }
        guard let token = token() else { return }
        if FileManager.default.fileExists(atPath: token.tempPath) {
            let data = try Data(contentsOf: URL(fileURLWithPath: token.tempPath))
            #expect(
                data.count >= token.offset, "\(label): the token claims \(token.offset), the file has \(data.count)")
            if token.offset > 0 {
                let version = CrashVersion.tagged(token.etag)
                #expect(
                    version?.hasPrefix(data.prefix(Int(token.offset))) == true,
                    "\(label): the token's \(token.offset) bytes are not a prefix of its version \(token.etag ?? "nil")"
                )
            }
        } else {
            // The engine moves a file into place only after a token that says it is complete.
            let claimed = "\(token.offset) of \(token.expectedLength.map(String.init) ?? "?") bytes"
            #expect(
                token.expectedLength != nil && token.offset == token.expectedLength,
                "\(label): the token names a missing temporary file but says \(claimed): a resume needs -o")
            #expect(
                (try? Data(contentsOf: finalURL)) == CrashVersion.tagged(token.etag).map { Data($0.bytes) },
                "\(label): the token's file is gone but file.bin is not its version")
        }
    }

    /// Resumes from the disk in a fresh process with `serving`, adding `-o` only when asked to; checks the outcome.
    private func resume(
        serving: CrashServing, label: String, window: String?, finishing: CrashVersion?, summary: inout CrashSummary
    ) async throws -> CrashOutcome {
        let version = serving.version
        // The bytes of `version` that a token on disk covers must not be asked for again.
        var covered: Int64 = 0
        if let token = token(), token.etag == version.etag, token.offset > 0, !serving.isGzipped,
            let data = try? Data(contentsOf: URL(fileURLWithPath: token.tempPath)), data.count >= token.offset,
            version.hasPrefix(data.prefix(Int(token.offset)))
        {
            covered = token.offset
            summary.coveredChecks += 1
        }
        let finalBefore = try? Data(contentsOf: finalURL)
        let coveredBefore = coverage()
        serve(serving)
        server.clearRequests()
        var (result, _) = try await run(["resume", tokenPath, "--json"])
        var outcome = CrashOutcome.finished
        if result.exitCode == 65, errorCode(result) == "destinationRequired" {
            #expect(result.stderr.contains("-o") || result.stdout.contains("-o"), "\(label): \(result)")
            (result, _) = try await run(["resume", tokenPath, "--json", "-o", finalURL.path])
            outcome = .finishedWithDestination
        }
        let requests = ranges
        switch result.exitCode {
        case 0:
            #expect(
                try Data(contentsOf: finalURL) == Data(version.bytes),
                "\(label): exit 0 but file.bin is not version \(version.name)")
            #expect(!FileManager.default.fileExists(atPath: tokenPath), "\(label): the token outlived the download")
        case 65, 75:
            outcome = errorCode(result) == "tokenGone" && result.exitCode == 65 ? .alreadyFinished : .failed
            #expect(!(errorMessage(result) ?? "").isEmpty, "\(label): an error without a message: \(result)")
            #expect(outcome == .alreadyFinished, "\(label): an unexpected error: \(result)")
            if outcome == .alreadyFinished {
                #expect(requests.isEmpty, "\(label): 'already finished' after requests \(requests)")
                #expect(
                    (try? Data(contentsOf: finalURL)) == finalBefore,
                    "\(label): 'already finished' changed file.bin")
            }
        case 1 where serving.isGzipped && errorCode(result) == "protocolViolation":
            // A gzip answer is refused; the partial download stays as it was.
            outcome = .refused
            #expect(!(errorMessage(result) ?? "").isEmpty, "\(label): an error without a message: \(result)")
            #expect(
                coverage() >= coveredBefore, "\(label): the refusal lost bytes the token covered (\(coveredBefore))")
            expectSameBytes((try? Data(contentsOf: finalURL)), finalBefore, "\(label): the refusal changed file.bin")
        default:
            Issue.record("\(label): neither a finished file nor a clear error: \(result)")
            outcome = .failed
        }
        try checkDisk(label)
        if covered > 0 {
            for range in requests {
                let start = range.flatMap { Int64($0.dropFirst("bytes=".count).prefix { $0 != "-" }) } ?? 0
                #expect(
                    start >= covered,
                    "\(label): asked again for bytes a token covered (\(covered)): requests \(requests)")
            }
        }
        // The finishing window: a file moved into place is reported as finished, never fetched again.
        switch window {
        case "renamed", "token removed":
            #expect(outcome == .alreadyFinished, "\(label): \(result)")
            expectSameBytes((try? Data(contentsOf: finalURL)), finishing.map { Data($0.bytes) }, "\(label)")
        case "final token written" where version == finishing && !serving.isGzipped:
            #expect(outcome == .finished, "\(label): \(result)")
            #expect(requests == ["bytes=\(CrashVersion.length)-"], "\(label): a complete file was fetched again")
        default:
            break
        }
        return outcome
    }

    private func failure(_ result: CLIResult) -> [String: Any]? {
        guard let line = result.stdoutLines.last, let object = try? jsonObject(line) else { return nil }
        return object["error"] as? [String: Any]
    }

    private func errorCode(_ result: CLIResult) -> String? { failure(result)?["code"] as? String }

    private func errorMessage(_ result: CLIResult) -> String? { failure(result)?["message"] as? String }
}

/// A gzip stream of stored (uncompressed) deflate blocks, built without a compressor.
enum CrashGzip {
    static func encode(_ bytes: [UInt8]) -> [UInt8] {
        var output: [UInt8] = [0x1F, 0x8B, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xFF]
        var start = 0
        repeat {
            let end = min(bytes.count, start + 65_535)
            let length = UInt16(end - start)
            output += [
                end == bytes.count ? 1 : 0, UInt8(length & 0xFF), UInt8(length >> 8), UInt8(~length & 0xFF),
                UInt8(~length >> 8),
            ]
            output += bytes[start..<end]
            start = end
        } while start < bytes.count
        return output + littleEndian(crc32(bytes)) + littleEndian(UInt32(truncatingIfNeeded: bytes.count))
    }

    private static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = (crc >> 1) ^ (0xEDB8_8320 & (0 &- (crc & 1))) }
        }
        return ~crc
    }

    private static func littleEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value & 0xFF), UInt8((value >> 8) & 0xFF), UInt8((value >> 16) & 0xFF), UInt8(value >> 24)]
    }
}
