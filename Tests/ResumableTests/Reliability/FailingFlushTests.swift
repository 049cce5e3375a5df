import Foundation
import LoopbackServer
import Testing

@testable import Resumable

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A flush that fails, as a failing disk makes `fdatasync` fail (`EIO`): nothing on this machine provokes one, so the
/// file layer's debug seam (``DurableSteps/failing(_:under:errno:)``) fails the flushes under one test's directory.
@Suite("A flush that fails")
struct FailingFlushTests {
    /// A resume into another directory copies the bytes beside the new destination. Without a checkpoint handler, no
    /// token names that copy until the task hands one out; when the last flush fails, it hands out none. The file the
    /// bytes were copied from is then all the caller's token has: it stays, and the copy no token names goes.
    @Test(
        "A resume into another directory whose last flush fails hands out no token and keeps the file the caller's token names",
        arguments: TransportKind.all)
    func failedFlushAfterRelocationKeepsTheOriginal(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let bytes = testBytes(count: 300_000, seed: 71)
        fixture.serve(.bytes(bytes))
        let first = BodyGate(holdingAfter: 100_000)
        fixture.server.enqueue(behavior: Behavior(gate: first), for: "/file.bin")
        let task = try fixture.download()
        try await fixture.waitUntilHeld(at: first, withOnDisk: 100_000)
        let token = try #require(await task.cancelProducingResumeData())
        first.open()
        #expect(token.offset == 100_000)
        let original = try Data(contentsOf: URL(fileURLWithPath: token.tempPath))

        let other = fixture.directory.url.appendingPathComponent("other")
        try FileManager.default.createDirectory(at: other, withIntermediateDirectories: true)
        let second = BodyGate(holdingAfter: 50_000)
        fixture.server.enqueue(behavior: Behavior(gate: second), for: "/file.bin")
        let resumed = try DownloadTask.resume(
            from: token, destination: .directory(other),
            configuration: fixture.applying(nil, to: DownloadFixture.configuration()))
        try #require(await second.waitUntilHeld(timeout: Waiting.deadline))
        // The copy holds the old bytes and the 50,000 the resume wrote since.
        try #require(
            try await waitUntilTemporaryFiles(in: other.path, count: 1, eachHolding: 150_000), "the copy never grew")

        DurableSteps.failing(.flush, under: other.path, errno: EIO)
        defer { DurableSteps.failing(.flush, under: other.path, errno: nil) }
        #expect(await resumed.cancelProducingResumeData() == nil, "a failed flush hands out no token")
        second.open()
        guard case .failure = await resumed.result else {
            Issue.record("the paused task succeeded")
            return
        }
        #expect(
            (try? Data(contentsOf: URL(fileURLWithPath: token.tempPath))) == original,
            "the file the caller's token names is gone or changed")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: other.path).isEmpty,
            "a copy no token names is left")

        DurableSteps.failing(.flush, under: other.path, errno: nil)
        let result = try await fixture.resumeThroughDisk(token).value
        #expect(try fixture.contents(of: result.fileURL) == bytes)
        #expect(fixture.ranges().last == "bytes=100000-")
    }
}
