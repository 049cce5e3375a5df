import Foundation

/// Human-readable sizes, rates and durations for progress output.
enum ByteFormat {
    /// `512 B`, `1.5 KiB`, `32.0 MiB`, `4.2 GiB`.
    static func size(_ bytes: Int64) -> String {
        let units = ["KiB", "MiB", "GiB", "TiB", "PiB"]
        guard bytes >= 1024 else { return "\(bytes) B" }
        var value = Double(bytes) / 1024
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return String(format: "%.1f", value) + " " + units[unit]
    }

    /// `4.0 MiB/s`.
    static func rate(_ bytesPerSecond: Double) -> String {
        guard bytesPerSecond.isFinite, bytesPerSecond >= 0 else { return "-" }
        return size(Int64(bytesPerSecond)) + "/s"
    }

    /// `0:05`, `12:30`, `1:02:03`.
    static func duration(_ duration: Duration) -> String {
        let total = max(duration.components.seconds, 0)
        let hours = total / 3600
        let minutes = (total % 3600) / 60
        let seconds = total % 60
        if hours > 0 { return String(format: "%lld:%02lld:%02lld", hours, minutes, seconds) }
        return String(format: "%lld:%02lld", minutes, seconds)
    }

    /// `0.25 s`, `1 s`, `2.5 s`: up to two decimals, without trailing zeros.
    static func seconds(_ duration: Duration) -> String {
        let value = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        var text = String(format: "%.2f", value)
        while text.hasSuffix("0") { text.removeLast() }
        if text.hasSuffix(".") { text.removeLast() }
        return text + " s"
    }

    /// `37%` of `done` out of `total`, rounded down so that 100% means complete.
    static func percent(_ done: Int64, of total: Int64) -> String {
        guard total > 0 else { return "100%" }
        return "\(min(done, total) * 100 / total)%"
    }

    /// `37.5%` with one decimal, rounded down.
    static func precisePercent(_ done: Int64, of total: Int64) -> String {
        guard total > 0 else { return "100.0%" }
        let tenths = min(done, total) * 1000 / total
        return "\(tenths / 10).\(tenths % 10)%"
    }

    /// A path quoted for a POSIX shell when it needs to be, for hints such as `resumable resume <path>`.
    static func shellQuoted(_ path: String) -> String {
        let safe = CharacterSet(
            charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,:@%=")
        if !path.isEmpty, path.unicodeScalars.allSatisfy({ safe.contains($0) }) { return path }
        return "'" + path.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}
