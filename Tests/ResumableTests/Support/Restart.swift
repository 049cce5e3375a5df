import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// What the queue tests do after a simulated restart: a new queue opens the store in `state`, restores it (no record
/// may be a problem), resumes every download and waits until nothing is left to do. Returns that queue's summary.
func restartAndFinish(
    state: URL, configuration: DownloadTask.Configuration
) async throws -> DownloadQueue.Summary {
    let store = try TaskStore(directory: state)
    let queue = DownloadQueue(configuration: .init(download: configuration), store: store)
    #expect(await queue.restore().isEmpty)
    await queue.resumeAll()
    return await queue.waitUntilIdle()
}

/// The names in `directory`, sorted (none when it cannot be read): for failure messages.
func sortedNames(in directory: URL) -> [String] {
    (try? FileManager.default.contentsOfDirectory(atPath: directory.path))?.sorted() ?? []
}

/// The end of the queue's name tests: `x.bin` in `output` still holds `kept`, the file saved first, and the other
/// download got the free name `x (1).bin` with `freeNamed`. `replaced` says what a replaced `x.bin` means.
func expectKept(
    _ kept: [UInt8], freeNamed: [UInt8], in output: URL, _ replaced: String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    let names = sortedNames(in: output)
    let contents = { (name: String) in (try? Data(contentsOf: output.appendingPathComponent(name))).map { [UInt8]($0) }
    }
    expectSameBytes(contents("x.bin"), kept, "\(replaced); the output holds \(names)", sourceLocation: sourceLocation)
    expectSameBytes(contents("x (1).bin"), freeNamed, "\(names)", sourceLocation: sourceLocation)
}

/// Two downloads to one name, `x.bin` in `fixture`'s `out/`: the first (20,000 bytes) served whole at `/a/x.bin`,
/// the second (200,000 bytes) held after 50,000 at `/b/x.bin`; a store directory `state`, and a configuration with
/// `.overwrite`, checkpoints every 50 ms and one connection.
struct SameNameDownloads {
    let first: [UInt8]
    let second: [UInt8]
    let firstURL: URL
    let secondURL: URL
    let gate: BodyGate
    let output: URL
    let target: URL
    let state: URL
    let configuration: DownloadTask.Configuration

    init(_ fixture: DownloadFixture, seeds: (UInt64, UInt64)) throws {
        first = testBytes(count: 20_000, seed: seeds.0)
        second = testBytes(count: 200_000, seed: seeds.1)
        firstURL = fixture.serve(.bytes(first), at: "/a/x.bin")
        gate = fixture.serveHeld(.bytes(second), after: 50_000, at: "/b/x.bin")
        secondURL = fixture.server.url(for: "/b/x.bin")
        output = fixture.directory.url.appendingPathComponent("out")
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        target = output.appendingPathComponent("x.bin")
        state = fixture.directory.url.appendingPathComponent("state")
        var configuration = DownloadFixture.configuration(existingFile: .overwrite)
        configuration.checkpointing = .init(interval: .milliseconds(50)) { _ in }
        configuration.connections = .single
        self.configuration = configuration
    }
}
