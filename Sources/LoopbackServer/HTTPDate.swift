#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Formats HTTP dates in the IMF-fixdate form (RFC 9110 §5.6.7), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
enum HTTPDate {
    private static let dayNames = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let monthNames = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]

    /// Formats a time given in seconds since the Unix epoch.
    ///
    /// - Parameter secondsSince1970: Seconds since 1970-01-01T00:00:00Z.
    /// - Returns: The IMF-fixdate string.
    static func format(secondsSince1970: Int64) -> String {
        var time = time_t(secondsSince1970)
        var parts = tm()
        guard gmtime_r(&time, &parts) != nil else { return "Thu, 01 Jan 1970 00:00:00 GMT" }
        let day = dayNames[Int(parts.tm_wday) % 7]
        let month = monthNames[Int(parts.tm_mon) % 12]
        return "\(day), \(twoDigits(parts.tm_mday)) \(month) \(parts.tm_year + 1900) "
            + "\(twoDigits(parts.tm_hour)):\(twoDigits(parts.tm_min)):\(twoDigits(parts.tm_sec)) GMT"
    }

    /// The current time, formatted.
    static func now() -> String {
        format(secondsSince1970: currentSeconds())
    }

    /// The current time in seconds since the Unix epoch.
    static func currentSeconds() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec)
    }

    private static func twoDigits(_ value: Int32) -> String {
        value < 10 ? "0\(value)" : "\(value)"
    }
}
