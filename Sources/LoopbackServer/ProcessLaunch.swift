import Foundation

private let launchLock = NSLock()

extension Process {
    /// `run()`, one at a time in this process, for tests that start servers and tools beside a loopback server.
    ///
    /// The suite's crash reports show swift-corelibs-foundation's `Process.run()` crashing in `memmove` when tests on
    /// several threads start children at the same instant; starting one at a time costs milliseconds.
    public func runSerialized() throws {
        launchLock.lock()
        defer { launchLock.unlock() }
        try run()
    }
}
