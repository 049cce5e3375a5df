import Foundation
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
    #expect(contents("x.bin") == kept, "\(replaced); the output holds \(names)", sourceLocation: sourceLocation)
    #expect(contents("x (1).bin") == freeNamed, "\(names)", sourceLocation: sourceLocation)
}
