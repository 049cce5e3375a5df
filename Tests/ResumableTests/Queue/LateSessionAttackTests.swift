import Foundation
import Testing

@testable import Resumable

/// Attacks on the last hour's queue changes (fe5664f, a3400a2: `forgetToken(_:naming:)` also drops a record token
/// naming another file; `keepsAbandonedFile` only for the token naming the kept file).
@Suite("Late-session attacks on the task store")
struct LateSessionStoreAttackTests {
    /// fe5664f promises (`docs/task-store.md`): a download that started over from a lost file and failed with nothing
    /// on disk drops the record's token naming the lost file, "and a failure with nothing on disk stays a failure for
    /// good". `DownloadQueue.ended` attaches `store.record(id)?.token` to a failure without a token unless
    /// `keepsAbandonedFile(id)`.
    ///
    /// Sequence, on the store step by step (as a3400a2 checks fe5664f): the record's token names `lost` (its file is
    /// gone); the download started over in `fresh`, got a 404 with nothing on disk, and the library calls
    /// `forgetToken(id, naming: fresh)`, while the record cannot be rewritten (a directory planted at
    /// `tasks/<id>.json.writing`, as a full or failing disk). `forgetToken` returns true (the file may go), but leaves
    /// the in-memory record with the token naming `lost`, and `keepsAbandonedFile(id)` is false: the queue then
    /// attaches a token naming a file that does not exist, and the 404 is reported resumable instead of for good.
    @Test("A record that cannot forget a token naming another (lost) file does not hand that token to the queue")
    func failedForgetOfAnotherFilesTokenKeepsNoToken() throws {
        let directory = try TemporaryDirectory()
        let state = directory.url.appendingPathComponent("state")
        let store = try TaskStore(directory: state)
        let id = DownloadQueue.TaskID()
        let lost = (store.partialPath as NSString).appendingPathComponent(".resumable-lost.partial")
        let fresh = (store.partialPath as NSString).appendingPathComponent(".resumable-fresh.partial")
        let base = TaskRecord(
            id: id, url: try #require(URL(string: "http://127.0.0.1:9/f.bin")), destination: .directory(directory.url),
            priority: 0, order: 0, state: .queued)
        try store.save(base, running: true)
        try store.checkpoint(id, token: .sample(tempPath: lost, offset: 100_000))
        #expect(!FileManager.default.fileExists(atPath: lost))

        // The record cannot be rewritten when the started-over download gives `fresh` up.
        let planted = state.appendingPathComponent("tasks/\(id).json.writing")
        try FileManager.default.createDirectory(at: planted, withIntermediateDirectories: false)
        #expect(store.forgetToken(id, naming: fresh), "the record never named the file: it may go")

        // What `DownloadQueue.ended` attaches to the failure: `keepsAbandonedFile(id) ? nil : record(id)?.token`.
        let attached = store.keepsAbandonedFile(id) ? nil : store.record(id)?.token
        #expect(
            attached == nil,
            "the queue attaches a token naming \(attached?.tempPath ?? ""), which does not exist: the 404 is resumable")
    }
}
