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
        let kept = try #require(error.resumeToken, "the 40,000 bytes on disk are described by no token: \(error)")
        #expect(kept.offset == Int64(Self.cut))
        #expect(FileManager.default.fileExists(atPath: kept.tempPath))
    }

    /// **FAILS on a5b4f80.** A legitimate download that now fails on every resume (rule 2's "resume from where the
    /// data stopped" turns into "never"). The first `200` (100,000 bytes under the strong `"v1"`) is cut after 40,000
    /// bytes. The file is then replaced by one of 120,000 bytes, but the server keeps the entity tag `"v1"` (a tag
    /// computed from something else than the bytes: a version number not bumped, a CDN's stale tag) and answers
    /// `200` without a length, ending at the close. Since a5b4f80 `receiveWhole` takes the 100,000 bytes known under
    /// `"v1"` as this answer's length (`vouchForSameBytes`), so the 100,001st byte fails the download with
    /// `protocolViolation` ("the body runs past its announced end"), which is not retried; the token it leaves keeps
    /// the length of 100,000 under `"v1"`, so every later `resume` fails the same way. On 1d99e01 the resume fetched the
    /// 120,000 bytes whole. The answer itself proves the vouching wrong: a close-delimited body that runs past the
    /// length the tag vouched for is no cut to guard against.
    ///
    /// Likely cause: `Sources/Resumable/Resume/ResumeStateMachine.swift:363-368` turns the vouched length into the
    /// answer's announced length, with the same "past its end" rule as a `Content-Length` the server sent itself.
    /// Fix: keep the vouched length as a floor only (a close before it is a cut, as a5b4f80 wants), not as a ceiling:
    /// a close-delimited body that goes past it is the server's new length (or: restart once without the stored
    /// validators, which the server has just contradicted).
    @Test(
        "FAILS on a5b4f80: a close-delimited 200 under the same strong tag, longer than the known length, finishes",
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
        switch await resumed.result {
        case .success(let result):
            let exact = [UInt8](try Data(contentsOf: result.fileURL)) == longer
            #expect(exact)
        case .failure(let error):
            // And its token cannot get further either.
            var again = "no token"
            if let next = error.resumeToken {
                let second = try DownloadTask.resume(
                    from: next, configuration: DownloadFixture.configuration(retries: 3, transport: transport))
                again = "\(await second.result)"
            }
            Issue.record("fails: \(error); resuming its token: \(again)")
        }
    }
}
