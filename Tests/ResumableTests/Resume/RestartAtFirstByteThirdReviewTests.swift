import Foundation
import LoopbackServer
import Synchronization
import Testing

@testable import Resumable

/// Third review of rule 9a (commits 117f691 … 656d78a): the first piece written whatever the stop says, the new file an
/// undo keeps when its token write fails (``DownloadEngine/State/abandonedFile``), and a checkpoint failure that
/// arrives while the switch records its token.
///
/// Tests named **FAILS on 656d78a** prove a break.
@Suite("Third review: a restart at the new answer's first byte (rule 9a)")
struct RestartAtFirstByteThirdReviewTests {
    static let length = RestartAtFirstByteTests.length
    static let cut = RestartAtFirstByteTests.cut
    typealias Once = RestartAtFirstByteReviewTests.Once

    /// How many temporary files `directory` holds.
    static func temporaryFiles(in directory: TemporaryDirectory) -> Int {
        directory.contents().filter { TemporaryFileName.isValid($0) }.count
    }

    // MARK: - A scheduled checkpoint fails while the switch records its token

    /// **FAILS on 656d78a** (and before). A resume joins a `206` of `"v1"` whose accepted token goes to the checkpoint
    /// handler, which is slow (a busy disk); the `206` is cut, and the retry is answered `200` with another version,
    /// `"v2"`. Its first piece passes the switch's check (no checkpoint failure yet), the new file is created, and the
    /// switch records the token naming it, behind the slow checkpoint, which then fails. The record itself succeeds
    /// (it does not look at the earlier failure), so the switch goes on and removes the 40,000 bytes of `"v1"`; the
    /// first piece is then refused for the checkpoint failure. The download ends `fileSystem` with no token and no
    /// file. A checkpoint failure anywhere else keeps the bytes (the end of the task flushes them and the error
    /// carries a token naming them); here one failed token write costs everything on disk (rule 2).
    ///
    /// Fix: in `switchFile`, after `checkpoints.record(token)`, treat `checkpoints.failure` like a stop (undo: flush
    /// the old file, record `before`'s token, remove the new one) — or have `record` throw a pending failure first.
    @Test(
        "FAILS on 656d78a: a checkpoint that fails while the switch records its token: the old bytes are kept",
        arguments: TransportKind.all)
    func checkpointFailsDuringSwitch(transport: TransportKind) async throws {
        let old = testBytes(count: Self.length, seed: 9701)
        let new = testBytes(count: Self.length + 20_000, seed: 9702)
        let server = try RawScriptServer { head, index, send in
            switch index {
            case 0:
                _ = send(RestartAtFirstByteTests.whole(old, tag: "\"v1\"", upTo: Self.cut))
                return .completed(0)
            case 1:
                // The resume is joined, then cut after 1,000 more bytes of "v1".
                let partial = RestartAtFirstByteTests.partial(old, from: Self.cut, tag: "\"v1\"")
                let headLength = partial.count - (old.count - Self.cut)
                return send(Array(partial[0..<(headLength + 1_000)])) ? .completed(1) : .clientLeft(0)
            default:
                return send(RestartAtFirstByteTests.whole(new, tag: "\"v2\"")) ? .completed(2) : .clientLeft(0)
            }
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let token = try await RestartAtFirstByteReviewTests.firstCut(server, into: directory, transport: transport)
        let slow = Once()
        var configuration = DownloadFixture.configuration(retries: 2, transport: transport)
        configuration.checkpointing = DownloadTask.Checkpointing(interval: .seconds(3600)) { token in
            // The 206's accepted token: held until the switch has created its new file (past its check of the
            // checkpoint failure), then it fails. 300 s bounds an endless wait.
            guard token.etag == "\"v1\"", slow.first() else { return }
            let until = ContinuousClock.now.advanced(by: .seconds(300))
            while Self.temporaryFiles(in: directory) < 2, ContinuousClock.now < until {
                Thread.sleep(forTimeInterval: 0.005)
            }
            throw ResumableError(.fileSystem, "the test's token disk failed once")
        }
        let resumed = try DownloadTask.resume(from: token, configuration: configuration)
        let error = try #require(await failure(of: resumed))
        #expect(error.code == .fileSystem, "\(error)")
        try RestartAtFirstByteSecondReviewTests.expectPrefix(
            error.resumeToken, old: old, new: new, "\(error); left: \(directory.contents())")
    }

    // MARK: - A cancel whose undo's token write fails

    /// **FAILS on 656d78a.** A resume is answered `200` with `"v2"`; the switch records the token naming the new file
    /// in the task's token file (`Checkpointing.file`), and the task is cancelled meanwhile. The undo's record of the
    /// old token fails once, so the new file is kept as the abandoned file, while the token file names it. The cancel
    /// then removes the old file (the token file does not name it) and the abandoned one, but never the token file,
    /// which is left naming a file that is gone: `cancel()` promises that "a `checkpointing` file is removed", and
    /// nothing of the download may be left behind (rule 3). On f213b6a, by reading (not run), the same cancel left nothing (the switch went
    /// on, and the token file named the task's file).
    ///
    /// Fix: in `conclude`, when the task is discarded, pass the abandoned file through
    /// `configuration.checkpointing?.abandoned?(abandoned.path)` before removing it, as the task's file is.
    @Test(
        "FAILS on 656d78a: a cancel during the switch whose undo's token write fails leaves no token file",
        arguments: TransportKind.all)
    func cancelWhoseUndoFails(transport: TransportKind) async throws {
        let old = testBytes(count: Self.length, seed: 9703)
        let new = testBytes(count: Self.length + 20_000, seed: 9704)
        let go = DispatchSemaphore(value: 0)
        go.signal()
        let server = try RestartAtFirstByteSecondReviewTests.server(old: old, new: new, go: go)
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let token = try await RestartAtFirstByteReviewTests.firstCut(server, into: directory, transport: transport)
        let tokenFile = directory.url.appendingPathComponent("file.bin.token")
        try token.write(to: tokenFile)
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let switching = Once()
        let failed = Once()
        let switchStarted = Mutex(false)
        var configuration = DownloadFixture.configuration(retries: 0, transport: transport)
        var checkpointing = DownloadTask.Checkpointing.file(tokenFile, interval: .seconds(3600))
        let write = checkpointing.handler
        checkpointing.handler = { token in
            // The undo's record of the old token: fails once, writing nothing.
            if switchStarted.withLock({ $0 }), token.etag == "\"v1\"", token.offset == Int64(Self.cut), failed.first() {
                throw ResumableError(.fileSystem, "the test's disk is full for a moment")
            }
            try write(token)
            guard token.etag == "\"v2\"", token.offset == 0, switching.first() else { return }
            switchStarted.withLock { $0 = true }
            entered.signal()
            _ = release.wait(timeout: .now() + 300)
        }
        configuration.checkpointing = checkpointing
        let resumed = try DownloadTask.resume(from: token, configuration: configuration)
        defer { release.signal() }
        #expect(await RestartAtFirstByteReviewTests.wait(entered), "the switch never started")
        resumed.cancel()
        release.signal()
        let error = try #require(await failure(of: resumed))
        #expect(error.code == .cancelled && error.resumeToken == nil, "\(error)")
        let named = (try? ResumeToken(contentsOf: tokenFile)).map { "the token file names \($0.tempPath)" } ?? ""
        #expect(directory.contents().isEmpty, "left behind: \(directory.contents()); \(named)")
    }

    // MARK: - The first piece ends connection 0's segment

    /// A transport whose answers a script gives, on the calling task's thread.
    final class ScriptedTransport: HTTPTransport {
        typealias Script =
            @Sendable (_ index: Int, _ request: TransportRequest, _ consumer: any ResponseConsumer)
            throws(ResumableError) -> Void
        private let script: Script
        private let count = Mutex(0)

        init(_ script: @escaping Script) {
            self.script = script
        }

        func execute(_ request: TransportRequest, consumer: some ResponseConsumer) async throws(ResumableError) {
            let index = count.withLock { count in
                defer { count += 1 }
                return count
            }
            try script(index, request, consumer)
        }

        /// The first and last byte a request's `Range` asks for, if it has one.
        static func range(of request: TransportRequest, total: Int) -> ClosedRange<Int>? {
            guard let value = request.headers.first(where: { $0.name.lowercased() == "range" })?.value,
                value.hasPrefix("bytes=")
            else { return nil }
            let parts = value.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false)
            guard parts.count == 2, let first = Int(parts[0]) else { return nil }
            let last = parts[1].isEmpty ? total - 1 : min(Int(parts[1]) ?? total - 1, total - 1)
            return first...last
        }

        static func head(_ status: Int, _ fields: [(String, String)]) -> ResponseHead {
            ResponseHead(status: status, headers: fields.map { HTTPHeader(name: $0.0, value: $0.1) })
        }

        static func deliver(_ bytes: ArraySlice<UInt8>, to consumer: any ResponseConsumer) throws(ResumableError) {
            let copy = Array(bytes)
            let delivered = copy.withUnsafeBytes { buffer in
                Result { () throws(ResumableError) in try consumer.receive(buffer) }
            }
            try delivered.get()
        }
    }

    /// **FAILS on 656d78a.** With `fixed(4)`, a resume is answered `200` with another version of 2 MiB, ranges
    /// advertised: the switch begins four segments of 512 KiB, and the transport's first piece is exactly connection
    /// 0's segment (a transport may hand over any amount; URLSession hands over what it buffered). Writing it completes
    /// the segment, and `receiveSegment` throws `segmentComplete`, which 656d78a lets out of `receive(_:connection:)`
    /// before `events.send(pending.event)`: the download finishes, restarted, without ever sending
    /// `.started(atOffset: 0, …)` for the answer it wrote (the event log's contract; f213b6a sent it before the
    /// piece).
    ///
    /// Fix: send `pending.event` before `receivePiece` (right after the switch), or in a `defer` of that branch.
    @Test("FAILS on 656d78a with fixed(4): a first piece that completes connection 0's segment: .started is sent")
    func firstPieceCompletesSegment() async throws {
        let old = testBytes(count: Self.length, seed: 9705)
        let new = testBytes(count: 2 << 20, seed: 9706)
        let segment = new.count / 4
        let transport = ScriptedTransport { index, request, consumer throws(ResumableError) in
            if index == 0 {
                // The first download: "v1", cut.
                let head = ScriptedTransport.head(
                    200, [("Content-Length", "\(old.count)"), ("Accept-Ranges", "bytes"), ("ETag", "\"v1\"")])
                guard consumer.receive(head) else { return }
                try ScriptedTransport.deliver(old[0..<Self.cut], to: consumer)
                throw ResumableError(.network, "the test cut the connection")
            }
            if index == 1 {
                // The resume: "v2" whole; its first piece is connection 0's segment, exactly.
                let head = ScriptedTransport.head(
                    200, [("Content-Length", "\(new.count)"), ("Accept-Ranges", "bytes"), ("ETag", "\"v2\"")])
                guard consumer.receive(head) else { return }
                try ScriptedTransport.deliver(new[0..<segment], to: consumer)
                try ScriptedTransport.deliver(new[segment...], to: consumer)
                return
            }
            // The other segments.
            guard let range = ScriptedTransport.range(of: request, total: new.count) else {
                throw ResumableError(.network, "the test expected a range request")
            }
            let head = ScriptedTransport.head(
                206,
                [
                    ("Content-Range", "bytes \(range.lowerBound)-\(range.upperBound)/\(new.count)"),
                    ("Content-Length", "\(range.count)"), ("ETag", "\"v2\""),
                ])
            guard consumer.receive(head) else { return }
            try ScriptedTransport.deliver(new[range], to: consumer)
        }
        let directory = try TemporaryDirectory()
        var configuration = Segmented.configuration(.fixed(4), retries: 0)
        configuration.transport = .custom(transport)
        let first = try DownloadTask(
            url: URL(string: "http://127.0.0.1:9/file.bin")!, destination: .directory(directory.url),
            configuration: configuration)
        let cut = try #require(await failure(of: first))
        let token = try #require(cut.resumeToken, "\(cut)")
        let events = EventLog()
        configuration.eventHandler = { event in events.append(event) }
        let resumed = try DownloadTask.resume(from: token, configuration: configuration)
        let result = try await resumed.result.get()
        let same = [UInt8](try Data(contentsOf: result.fileURL)) == new
        #expect(same, "the file is the new version")
        #expect(result.restarted)
        let started = events.all.contains { event in
            guard case .started(let offset, let expected) = event else { return false }
            return offset == 0 && expected == Int64(new.count)
        }
        #expect(started, "no .started(atOffset: 0) for the answer the file was written from: \(events.all)")
    }
}
