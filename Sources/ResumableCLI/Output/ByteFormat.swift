import Foundation

/// Human-readable sizes, rates and durations for progress output.
///
/// Every function accepts any value of its parameter type, including `Int64.min`, `Int64.max`, negative numbers,
/// NaN, infinities and durations beyond `Int64.max` seconds, and returns text without trapping: the values come
/// from tokens and servers (an offset of 10^16, a `Retry-After` of 10^18 seconds), so no arithmetic here may
/// overflow.
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

    /// `4.0 MiB/s`; `-` for a negative or non-finite rate.
    static func rate(_ bytesPerSecond: Double) -> String {
        guard bytesPerSecond.isFinite, bytesPerSecond >= 0 else { return "-" }
        return size(wholeNumber(bytesPerSecond)) + "/s"
    }

    /// `value` rounded toward zero and clamped to the `Int64` range; 0 for NaN.
    ///
    /// `Int64(_:)` traps from 2^63 on; this is the conversion to use for any computed `Double`.
    static func wholeNumber(_ value: Double) -> Int64 {
        guard !value.isNaN else { return 0 }
        // 2^63 is the first Double above Int64.max; -2^63 is Int64.min exactly.
        if value >= 0x1p63 { return .max }
        if value <= -0x1p63 { return .min }
        return Int64(value)
    }

    /// Whole seconds of `duration`, rounded toward zero and clamped to the `Int64` range.
    ///
    /// `Duration.components` traps for durations beyond `Int64.max` seconds, which `Duration` can hold.
    static func wholeSeconds(_ duration: Duration) -> Int64 {
        if duration >= .seconds(Int64.max) { return .max }
        if duration <= .seconds(Int64.min) { return .min }
        return duration.components.seconds
    }

    /// Whole milliseconds of `duration`, rounded toward zero and clamped to the `Int64` range.
    static func milliseconds(_ duration: Duration) -> Int64 {
        if duration >= .milliseconds(Int64.max) { return .max }
        if duration <= .milliseconds(Int64.min) { return .min }
        // Within ±Int64.max milliseconds the seconds are below 2^63 / 1000, so `* 1000` cannot overflow, and both
        // components carry the sign of the duration, so the sum moves toward zero from a representable bound.
        let (seconds, attoseconds) = duration.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    /// `0:05`, `12:30`, `1:02:03`; negative durations show as `0:00`.
    static func duration(_ duration: Duration) -> String {
        let total = max(wholeSeconds(duration), 0)
        let hours = total / 3600
        let minutes = (total % 3600) / 60
        let seconds = total % 60
        if hours > 0 { return String(format: "%lld:%02lld:%02lld", hours, minutes, seconds) }
        return String(format: "%lld:%02lld", minutes, seconds)
    }

    /// `0.25 s`, `1 s`, `2.5 s`: up to two decimals, without trailing zeros.
    static func seconds(_ duration: Duration) -> String {
        let value: Double
        if duration >= .seconds(Int64.max) || duration <= .seconds(Int64.min) {
            value = Double(wholeSeconds(duration))
        } else {
            value = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        }
        var text = String(format: "%.2f", value)
        while text.hasSuffix("0") { text.removeLast() }
        if text.hasSuffix(".") { text.removeLast() }
        return text + " s"
    }

    /// `37%` of `done` out of `total`, rounded down so that 100% means complete.
    ///
    /// `done` is clamped to `0...total`; a total of zero or less is complete.
    static func percent(_ done: Int64, of total: Int64) -> String {
        guard total > 0 else { return "100%" }
        return "\(scaledFraction(done, of: total, by: 100))%"
    }

    /// `37.5%` with one decimal, rounded down.
    static func precisePercent(_ done: Int64, of total: Int64) -> String {
        guard total > 0 else { return "100.0%" }
        let tenths = scaledFraction(done, of: total, by: 1000)
        return "\(tenths / 10).\(tenths % 10)%"
    }

    /// `done * scale / total`, rounded down, with `done` clamped to `0...total` (`total` > 0, `scale` >= 0).
    ///
    /// The product is computed in 128 bits: `done * 1000` overflows `Int64` from about 9.2 × 10^15, an offset a
    /// token can hold. The quotient is at most `scale`, so it fits.
    private static func scaledFraction(_ done: Int64, of total: Int64, by scale: Int64) -> Int64 {
        let clamped = min(max(done, 0), total)
        return total.dividingFullWidth(clamped.multipliedFullWidth(by: scale)).quotient
    }

    /// A path quoted for a POSIX shell when it needs to be, for hints such as `resumable resume <path>`.
    ///
    /// The quotes are placed scalar by scalar, as a shell reads bytes: a `'` followed by a combining mark (`'\u{301}`)
    /// is one `Character`, which a `Character`-wise replacement would leave unescaped, ending the quoted word early
    /// (a server-chosen file name could then inject a command into the hint).
    static func shellQuoted(_ path: String) -> String {
        let safe = CharacterSet(
            charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,:@%=")
        if !path.isEmpty, path.unicodeScalars.allSatisfy({ safe.contains($0) }) { return path }
        var quoted = "'"
        for scalar in path.unicodeScalars {
            if scalar == "'" {
                quoted.unicodeScalars.append(contentsOf: "'\\''".unicodeScalars)
            } else {
                quoted.unicodeScalars.append(scalar)
            }
        }
        quoted.unicodeScalars.append("'")
        return quoted
    }
}
