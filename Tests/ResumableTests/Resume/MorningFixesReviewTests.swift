import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Review by helper 101 of a5b4f80 (a length the strong validator vouches for, unquoted ETags).
///
/// Tests named **FAILS on a5b4f80** prove a break.
@Suite("Review of a5b4f80: validators read through Validators(of:), answers after a restart")
struct MorningFixesReviewTests {
    static let length = 100_000
    static let cut = 40_000
    static let lastModified = "Tue, 01 Dec 2026 10:00:00 GMT"
    static let date = "Thu, 03 Dec 2026 06:00:00 GMT"

    /// The head lines of every answer below: an unquoted `tag` and a strong Last-Modified (two days before `Date`).
    static func lines(_ tag: String) -> [String] {
        ["ETag: \(tag)", "Last-Modified: \(lastModified)", "Date: \(date)", "Accept-Ranges: bytes"]
    }

    /// **FAILS on a5b4f80.** Rule 1 (never splice two versions). The server sends its `ETag` without quotes, as some
    /// do (`ETag: v1-100000`, not an entity tag), beside a strong `Last-Modified`. The first `200` (version 1) is cut
    /// after 40,000 bytes; the token keeps the date only. Then the file is replaced by version 2, of the same length,
    /// whose unquoted tag changed (`v2-100000`) while its `Last-Modified` stayed the same (a file written again within
    /// the second, a deploy that sets the modification time from the build, `rsync --times`, `cp -p`). The resume sends
    /// `If-Range: <date>`, the server matches the date and answers `206` from byte 40,000 of version 2, carrying the
    /// changed tag. Since a5b4f80 `Validators.agree` reads the answer through `Validators(of:)`, which drops the
    /// unquoted tag, so the one validator that shows the change is never looked at: the `206` is joined and the
    /// finished file is 40,000 bytes of version 1 followed by 60,000 bytes of version 2. On 1d99e01 (`agree` compared
    /// the raw value) it restarted and the file was version 2, whole.
    ///
    /// Likely cause: `Sources/Resumable/Resume/Validators.swift:82-83` (`agree` reads `Validators(of: head)`), with
    /// `init(of:)` (`:39`) forgetting the unquoted value on both sides. Fix: keep an `ETag` that is no entity tag as an
    /// opaque value of its own (in the validators and the token, never sent in `If-Range`): an answer that carries the
    /// same opaque value is not contradicted by it (helper 99's case, still joined), one that carries another value is
    /// another version and restarts.
    @Test(
        "FAILS on a5b4f80: an unquoted ETag that changed beside the same strong date: the 206 is never joined",
        arguments: TransportKind.all)
    func changedUnquotedTagWithSameDate(transport: TransportKind) async throws {
        let version1 = testBytes(count: Self.length, seed: 10_101)
        let version2 = testBytes(count: Self.length, seed: 10_102)
        let server = try RawScriptServer { head, index in
            if index == 0 {
                return RawScriptServer.head("200 OK", Self.lines("v1-100000") + ["Content-Length: \(Self.length)"])
                    + version1[0..<Self.cut]
            }
            // Version 2 from now on, under the same Last-Modified: a server that checks If-Range against the date.
            let range = RawScriptServer.header("Range", in: head).map { String(decoding: $0, as: UTF8.self) }
            let ifRange = RawScriptServer.header("If-Range", in: head).map { String(decoding: $0, as: UTF8.self) }
            guard let range, range.hasPrefix("bytes="), range.hasSuffix("-"),
                ifRange == nil || ifRange == Self.lastModified,
                let from = Int(range.dropFirst(6).dropLast()), from < Self.length
            else {
                return RawScriptServer.head("200 OK", Self.lines("v2-100000") + ["Content-Length: \(Self.length)"])
                    + version2
            }
            return RawScriptServer.head(
                "206 Partial Content",
                Self.lines("v2-100000") + [
                    "Content-Range: bytes \(from)-\(Self.length - 1)/\(Self.length)",
                    "Content-Length: \(Self.length - from)",
                ]) + version2[from...]
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let token = try await RestartAtFirstByteReviewTests.firstCut(server, into: directory, transport: transport)
        #expect(token.offset == Int64(Self.cut))
        #expect(token.lastModified == Self.lastModified)
        let resumed = try DownloadTask.resume(
            from: token, configuration: DownloadFixture.configuration(retries: 0, transport: transport))
        switch await resumed.result {
        case .success(let result):
            let bytes = [UInt8](try Data(contentsOf: result.fileURL))
            let spliced = bytes.count == Self.length && bytes[..<Self.cut] == version1[..<Self.cut]
            let exact = bytes == version2
            #expect(exact, "spliced (version 1 then version 2): \(spliced); restarted: \(result.restarted)")
        case .failure(let error):
            // Refusing is fine; the bytes on disk must still be described by a token.
            #expect(error.resumeToken != nil, "\(error)")
        }
    }

    /// **FAILS on a5b4f80** (found beside it, not made by it). Rule 2 (nothing downloaded is lost without need) and
    /// rule 9a of docs/protocol-rules.md ("an answer cut, turned away or paused before its first byte leaves the old
    /// file and the token naming it as they were"). A first `200` under the strong `"v1"` is cut after 40,000 bytes.
    /// The resume's `206` has a `Content-Range` that does not parse: the machine restarts (rightly: it asks for the
    /// whole file), and the server answers that plain GET with a `206` again, which is a broken server: the download
    /// fails with `protocolViolation` ("unusable 206 to a request without a range"). No byte of either answer reached a
    /// file, yet the error carries no token: the 40,000 bytes on disk are no longer described by anything (with
    /// `get -i --state`, the task's record and its partial file are removed: "1 failed, 0 left to resume").
    ///
    /// Likely cause: `Sources/Resumable/Resume/ResumeStateMachine.swift:452-458` (`restartOrFail`) fails the unasked
    /// `206` after `restart` (`:461-468`) already set the state to a new, empty file, so the failure describes no
    /// bytes; unlike the branch at `:250-258` ("the bytes on disk are kept"), nothing brings back the old file's state
    /// before the switch of rule 9a happened. Fix: fail such an answer as the switch would be undone (the old bytes and
    /// their token), as other failures before a restarted answer's first byte are.
    ///
    /// **Known issue, left open at stop 31.** A restart decided at an answer that is dropped unread (an unusable `206`,
    /// a `416` without a usable `Content-Range`) still switches to the new file before its request, not at the first
    /// byte of a `200` as rule 9a's restarts at a `200` do: the switch would have to wait with the machine's state
    /// from before that answer, and its restart count and hop limits carried across the undo, which is more than this
    /// stop could do safely. The test records the loss as a known issue until then; it fails when the bytes are kept.
    @Test(
        "FAILS on a5b4f80: a restart whose plain GET is answered by an unusable 206 keeps the old bytes' token",
        arguments: TransportKind.all)
    func unusablePartialAfterRestartKeepsToken(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 10_106)
        let server = try RawScriptServer { _, index in
            if index == 0 { return RestartAtFirstByteTests.whole(content, tag: "\"v1\"", upTo: Self.cut) }
            return RawScriptServer.head(
                "206 Partial Content", ["Content-Range: bytes garbage", "Content-Length: 10"],
                etag: Array("\"v1\"".utf8)) + content[0..<10]
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let token = try await RestartAtFirstByteReviewTests.firstCut(server, into: directory, transport: transport)
        #expect(token.offset == Int64(Self.cut))
        let resumed = try DownloadTask.resume(
            from: token, configuration: DownloadFixture.configuration(retries: 0, transport: transport))
        let error = try #require(await failure(of: resumed))
        #expect(server.requests.count == 3)
        withKnownIssue("a restart at an answer dropped unread switches files before its request (stop 31)") {
            let kept = try #require(error.resumeToken, "the 40,000 bytes on disk are described by no token: \(error)")
            #expect(kept.offset == Int64(Self.cut))
            #expect(FileManager.default.fileExists(atPath: kept.tempPath))
        }
    }

    /// Helper 101 proved that a server keeping its strong `"v1"` for a file that grew (100,000 to 120,000 bytes), and
    /// answering `200` without a length, now fails the resume: the 100,001st byte runs past the length `"v1"` vouched
    /// for (`protocolViolation`, not retried), and so does every resume of the token it leaves. Before a5b4f80 the
    /// resume fetched the 120,000 bytes whole, but the same reading called a close after 60,000 bytes complete
    /// (`SingleDownloadReviewTests`). The server contradicts its own strong validator (RFC 9110 §8.8.1: it changes
    /// with any byte), so which of its answers to trust cannot be told; the download fails with its bytes kept and no
    /// file, never a short one. A download started afresh (no validator to vouch) gets the file.
    @Test(
        "A close-delimited 200 under the same strong tag, longer than the known length: fails, bytes kept, no file",
        arguments: TransportKind.all)
    func longerCloseDelimitedUnderSameTag(transport: TransportKind) async throws {
        let content = testBytes(count: Self.length, seed: 10_107)
        let longer = testBytes(count: 120_000, seed: 10_108)
        let server = try RawScriptServer { _, index in
            if index == 0 { return RestartAtFirstByteTests.whole(content, tag: "\"v1\"", upTo: Self.cut) }
            return RawScriptServer.head("200 OK", [], etag: Array("\"v1\"".utf8)) + longer
        }
        defer { server.stop() }
        let directory = try TemporaryDirectory()
        let token = try await RestartAtFirstByteReviewTests.firstCut(server, into: directory, transport: transport)
        #expect(token.expectedLength == Int64(Self.length))
        let resumed = try DownloadTask.resume(
            from: token, configuration: DownloadFixture.configuration(retries: 3, transport: transport))
        let error = try #require(await failure(of: resumed))
        #expect(error.code == .protocolViolation, "\(error)")
        let kept = try #require(error.resumeToken, "\(error)")
        #expect(FileManager.default.fileExists(atPath: kept.tempPath))
        #expect(
            directory.contents().filter { !TemporaryFileName.isValid($0) }.isEmpty, "\(directory.contents())")
        let elsewhere = try TemporaryDirectory()
        let fresh = try DownloadTask(
            url: URL(string: "http://127.0.0.1:\(server.port)/file.bin")!,
            destination: .directory(elsewhere.url),
            configuration: DownloadFixture.configuration(retries: 0, transport: transport))
        let result = try await fresh.value
        expectSameBytes(try Data(contentsOf: result.fileURL), longer)
    }
}
