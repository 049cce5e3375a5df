// Downloads one URL with the library and prints one JSON line: transport, bytes, wall seconds.
// CPU time and peak RSS are measured by the caller (Benchmarks/bench.py, from wait4's rusage).
//
//     TransportThroughput URL DIRECTORY [--transport libcurl|urlSession|automatic]
//                         [--checkpoint-ms N] [--slow-writer BYTES_PER_SECOND] [--concurrent N]
//
// The file goes into DIRECTORY and is deleted afterwards; with --concurrent N the URL is downloaded N times at
// once, in one process, into DIRECTORY/concurrent-I.bin (bytes is then the sum; wall ends with the last one).
// With --checkpoint-ms a token is checkpointed to
// DIRECTORY/bench.token.json every N ms, as `resumable get` does every second. --slow-writer sets the
// library's benchmark-only environment variable RESUMABLE_BENCHMARK_WRITER_BYTES_PER_SECOND, which makes the
// transport's thread sleep after each write, as a slow disk would.
import Foundation
import Resumable

@MainActor func option(_ name: String, in arguments: inout [String]) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    defer { arguments.removeSubrange(index...(index + 1)) }
    return arguments[index + 1]
}
var arguments = Array(CommandLine.arguments.dropFirst())
let transportName = option("--transport", in: &arguments) ?? "automatic"
let checkpointMilliseconds = option("--checkpoint-ms", in: &arguments).flatMap(Int.init)
let slowWriter = option("--slow-writer", in: &arguments).flatMap(Int.init)
let concurrent = option("--concurrent", in: &arguments).flatMap(Int.init)
guard arguments.count == 2, let url = URL(string: arguments[0]), (concurrent ?? 1) >= 1 else {
    FileHandle.standardError.write(Data("usage: TransportThroughput URL DIRECTORY [options]\n".utf8))
    exit(2)
}
let directory = URL(fileURLWithPath: arguments[1], isDirectory: true)
if let slowWriter {
    // Read by the library when a configuration is created, so it must be set before the first one.
    setenv("RESUMABLE_BENCHMARK_WRITER_BYTES_PER_SECOND", String(slowWriter), 1)
}

var configuration = DownloadTask.Configuration(existingFile: .overwrite)
switch transportName {
case "libcurl": configuration.transport = .libcurl
case "urlSession": configuration.transport = .urlSession
default: configuration.transport = .automatic
}
if let checkpointMilliseconds {
    configuration.checkpointing = .file(
        directory.appendingPathComponent("bench.token.json"),
        interval: .milliseconds(checkpointMilliseconds)
    )
}

let clock = ContinuousClock()
let start = clock.now
do {
    var transport = ""
    var bytes: Int64 = 0
    if let concurrent {
        let tasks = try (0..<concurrent).map { index in
            try DownloadTask(
                url: url,
                destination: .file(directory.appendingPathComponent("concurrent-\(index).bin")),
                configuration: configuration
            )
        }
        for task in tasks {
            let result = try await task.value
            transport = "\(result.transport)"
            bytes += result.bytesOnDisk
            try? FileManager.default.removeItem(at: result.fileURL)
        }
    } else {
        let result = try await DownloadTask(url: url, destination: .directory(directory), configuration: configuration)
            .value
        transport = "\(result.transport)"
        bytes = result.bytesOnDisk
        try? FileManager.default.removeItem(at: result.fileURL)
    }
    let wall = clock.now - start
    let seconds = Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18
    print("{\"transport\":\"\(transport)\",\"bytes\":\(bytes),\"downloads\":\(concurrent ?? 1),\"wall\":\(seconds)}")
} catch {
    FileHandle.standardError.write(Data("download failed: \(error)\n".utf8))
    exit(1)
}
