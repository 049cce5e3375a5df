import Foundation
import LoopbackServer
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A batch paused into its store half way: what the tests of moved, copied and aliased state directories start from.
enum PausedBatch {
    /// The library's temporary files in `directory` and their sizes.
    static func temporaryFiles(in directory: URL) -> [String: Int64] {
        var sizes: [String: Int64] = [:]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        where name.hasPrefix(".resumable-") && name.hasSuffix(".partial") {
            let attributes = try? FileManager.default.attributesOfItem(
                atPath: directory.appendingPathComponent(name).path)
            sizes[name] = (attributes?[.size] as? NSNumber)?.int64Value
        }
        return sizes
    }

    /// Serves 1 MiB at `path` (held after 100,000 bytes), runs `get -i list.txt -o out/ --state STATE` in `scratch`
    /// until those bytes are in `partialDirectory` (the store's `partial/`, however reached), interrupts it (SIGINT,
    /// exit 130) and returns the file's bytes. The gate is open afterwards. With `validators` false the file is served
    /// without an ETag or a Last-Modified, so the paused token cannot be joined: its resume starts a new file first.
    static func make(
        server: LoopbackServer, in scratch: ScratchDirectory, path: String, seed: UInt64, state: String,
        partialDirectory: URL, validators: Bool = true
    ) async throws -> [UInt8] {
        let content = Resource.generatedBytes(seed: seed, range: 0..<(1 << 20))
        let gate = BodyGate(holdingAfter: 100_000)
        server.register(validators ? .bytes(content) : .bytes(content, etag: nil, lastModified: nil), at: path)
        server.enqueue(behavior: Behavior(gate: gate), for: path)
        try Data((server.url(for: path).absoluteString + "\n").utf8).write(to: scratch.file("list.txt"))
        let process = try await CLIProcess.start(
            ["get", "-i", "list.txt", "-o", "out/", "--state", state], in: scratch.url)
        #expect(await gate.waitUntilHeld(count: 1, timeout: CLIProcess.deadline), "\(gate)")
        let written = try await eventually { temporaryFiles(in: partialDirectory).values.contains(100_000) }
        try #require(written, "\(temporaryFiles(in: partialDirectory))")
        process.send(SIGINT)
        let interrupted = try await process.finish()
        gate.open()
        try #require(interrupted.exitCode == 130, "\(interrupted)")
        return content
    }
}
