import Foundation
import Testing

@testable import Resumable

/// A complete token whose temporary file is gone, and a file of the token's length where the finished file would
/// be: the move happened only if that file changed status (the rename) after the token was made. An older file of
/// the same length is someone else's (helper 50: a checksum mismatch removed the temporary file and a crash kept
/// the token; the next resume called an old file of that length finished).
@Suite("Reconciliation: a file of the right length is the moved download only if it changed after the token")
struct MovedIntoPlaceTests {
    static func resumeMessage(_ token: ResumeToken) async -> String {
        do {
            let task = try DownloadTask.resume(from: token, configuration: FinalRoundAttackTests.configuration())
            _ = await task.cancelProducingResumeData()
            return "resumed"
        } catch {
            return error.message
        }
    }

    @Test(
        "A same-length file that changed before the token was made is not the finished download; one after it is",
        arguments: [false, true])
    func fileOlderThanToken(tokenIsOlder: Bool) async throws {
        let scratch = try TemporaryDirectory()
        let output = scratch.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        let existing = output.appendingPathComponent("f.bin")
        let bytes = testBytes(count: 1 << 20, seed: 5001)
        try Data(bytes).write(to: existing)
        var status = stat()
        try #require(lstat(existing.path, &status) == 0)
        let changed = Date(
            timeIntervalSince1970: Double(status.st_ctim.tv_sec) + Double(status.st_ctim.tv_nsec) / 1e9)

        let token = ResumeToken.sample(
            tempPath: output.appendingPathComponent(TemporaryFileName.make()).path, offset: 1 << 20,
            destination: output.path + "/", updatedAt: changed + (tokenIsOlder ? -60 : 60))
        let message = await Self.resumeMessage(token)
        if tokenIsOlder {
            #expect(message.contains("already finished"), "\(message)")
        } else {
            #expect(!message.contains("already finished"), "an older file was called the finished one: \(message)")
        }
        try expectSameBytes(Data(contentsOf: existing), Data(bytes))
        #expect(try FileManager.default.contentsOfDirectory(atPath: output.path) == ["f.bin"])
    }
}
