// Downloads one URL with one transport and prints the wall time, the CPU time and the peak RSS of the whole
// process, for comparing the transports with each other and with `curl -o`.
//
//     TransportThroughput libcurl|urlSession|automatic URL [DIRECTORY]
//
// The file goes into DIRECTORY (default: the temporary directory) and is deleted afterwards.
import Foundation
import Resumable

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

let arguments = CommandLine.arguments
guard arguments.count >= 3, let url = URL(string: arguments[2]) else {
    FileHandle.standardError.write(
        Data("usage: TransportThroughput libcurl|urlSession|automatic URL [DIRECTORY]\n".utf8))
    exit(2)
}
let transport: DownloadTask.Transport
switch arguments[1] {
case "libcurl": transport = .libcurl
case "urlSession": transport = .urlSession
default: transport = .automatic
}
let directory = URL(fileURLWithPath: arguments.count > 3 ? arguments[3] : NSTemporaryDirectory(), isDirectory: true)

let clock = ContinuousClock()
let start = clock.now
let result: DownloadResult
do {
    let task = try DownloadTask(
        url: url,
        destination: .directory(directory),
        configuration: DownloadTask.Configuration(existingFile: .overwrite, transport: transport)
    )
    result = try await task.value
} catch {
    FileHandle.standardError.write(Data("download failed: \(error)\n".utf8))
    exit(1)
}
let wall = clock.now - start
try? FileManager.default.removeItem(at: result.fileURL)

var usage = rusage()
#if canImport(Glibc)
    getrusage(RUSAGE_SELF.rawValue, &usage)
#else
    getrusage(RUSAGE_SELF, &usage)
#endif
func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
let wallSeconds = Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18
#if canImport(Darwin)
    let peakMiB = Double(usage.ru_maxrss) / 1_048_576
#else
    let peakMiB = Double(usage.ru_maxrss) / 1024
#endif
print(
    String(
        format: "%@: %lld bytes in %.2f s wall (%.0f MB/s), %.2f s user, %.2f s sys, %.1f MiB peak RSS",
        result.transport.description, result.bytesOnDisk, wallSeconds, Double(result.bytesOnDisk) / wallSeconds / 1e6,
        seconds(usage.ru_utime), seconds(usage.ru_stime), peakMiB))
