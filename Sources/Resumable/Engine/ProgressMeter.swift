/// Counts transferred bytes and estimates the rate, for progress reports.
struct ProgressMeter: Sendable {
    let interval: Duration
    /// Bytes received since the task started, over all requests.
    private(set) var bytesTransferred: Int64 = 0
    /// The offset the current transfer joined at.
    var transferStart: Int64
    private var lastReportAt: ContinuousClock.Instant
    private var sampleAt: ContinuousClock.Instant
    private var sampleBytes: Int64 = 0
    private var bytesPerSecond: Double = 0

    init(interval: Duration, offset: Int64, now: ContinuousClock.Instant = .now) {
        self.interval = interval
        self.transferStart = offset
        self.lastReportAt = now
        self.sampleAt = now
    }

    /// Counts `count` more bytes; returns whether a report is due.
    mutating func add(_ count: Int, now: ContinuousClock.Instant = .now) -> Bool {
        bytesTransferred += Int64(count)
        return now - lastReportAt >= interval
    }

    /// A report of `bytesOnDisk` out of `expectedLength`, updating the rate.
    mutating func report(
        bytesOnDisk: Int64, expectedLength: Int64?, connections: Int = 1, now: ContinuousClock.Instant = .now
    ) -> DownloadProgress {
        lastReportAt = now
        let elapsed = now - sampleAt
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        if seconds >= 0.05 {
            let instant = Double(bytesTransferred - sampleBytes) / seconds
            bytesPerSecond = bytesPerSecond == 0 ? instant : 0.7 * bytesPerSecond + 0.3 * instant
            sampleAt = now
            sampleBytes = bytesTransferred
        }
        return DownloadProgress(
            bytesOnDisk: bytesOnDisk,
            expectedLength: expectedLength,
            resumedAtOffset: transferStart,
            bytesTransferred: bytesTransferred,
            bytesPerSecond: bytesPerSecond,
            connections: connections
        )
    }
}
