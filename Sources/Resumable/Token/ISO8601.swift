import Foundation

/// The dates of the token format (`createdAt`, `updatedAt`): RFC 3339 `date-time`, written in UTC to the
/// millisecond, e.g. `2026-11-30T03:44:40.250Z`.
///
/// Both directions are plain arithmetic on fields read by position (the calendar arithmetic is `HTTPDate`'s), with
/// no formatter: a token is data from outside, and ICU's parser behind `ISO8601DateFormatter` crashes the process
/// with SIGFPE on some long fractions (`2026-11-30T03:40:00.860164470946075312283793887493383256980Z`), besides
/// accepting years of any length and offsets such as `+99:99`.
///
/// Parsing accepts exactly RFC 3339 §5.6 `date-time`, with no surrounding whitespace:
/// - `YYYY-MM-DD`, `T`, `hh:mm:ss`, an optional fraction (`.` and one or more digits), then `Z` or `+hh:mm` /
///   `-hh:mm`; `T` and `Z` may be lowercase (RFC 3339 §5.6 note);
/// - year 0001–9999 (the range `format` writes, so what is read can be written back), month 01–12, a day that exists in its month (proleptic Gregorian), hour 00–23, minute 00–59,
///   second 00–60 (a leap second lands on the first second of the next minute, as POSIX time has none), offset
///   hour 00–23 and minute 00–59;
/// - a fraction is kept to the nanosecond; further digits are read and ignored, however many there are.
enum ISO8601 {
    /// Milliseconds from 1970 of 0001-01-01T00:00:00.000Z, the earliest instant `format` writes.
    private static let earliestMilliseconds: Int64 = -62_135_596_800_000
    /// Milliseconds from 1970 of 9999-12-31T23:59:59.999Z, the latest instant `format` writes.
    private static let latestMilliseconds: Int64 = 253_402_300_799_999

    /// `date` as `YYYY-MM-DDThh:mm:ss.sssZ`, rounded to the nearest millisecond.
    ///
    /// Instants outside years 0001–9999, which four digits cannot express, are clamped to that range; NaN is
    /// written as the earliest instant.
    static func format(_ date: Date) -> String {
        let scaled = (date.timeIntervalSince1970 * 1000).rounded()
        let milliseconds: Int64
        if scaled.isNaN || scaled <= Double(earliestMilliseconds) {
            milliseconds = earliestMilliseconds
        } else if scaled >= Double(latestMilliseconds) {
            milliseconds = latestMilliseconds
        } else {
            milliseconds = Int64(scaled)
        }
        let (seconds, millisecond) = HTTPDate.floorDivide(milliseconds, by: 1000)
        let (days, secondOfDay) = HTTPDate.floorDivide(seconds, by: 86_400)
        let (year, month, day) = HTTPDate.civil(fromDays: days)
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(secondOfDay / 3600, 2)):"
            + "\(pad(secondOfDay % 3600 / 60, 2)):\(pad(secondOfDay % 60, 2)).\(pad(millisecond, 3))Z"
    }

    /// Parses an RFC 3339 `date-time`; nil when it is malformed in any way or names an impossible date or time.
    static func parse(_ string: String) -> Date? {
        let bytes = Array(string.utf8)
        guard bytes.count >= 20,
            bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
            bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t"),
            bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
            let year = HTTPSyntax.parseDigits(bytes[0..<4]),
            let month = HTTPSyntax.parseDigits(bytes[5..<7]),
            let day = HTTPSyntax.parseDigits(bytes[8..<10]),
            let hour = HTTPSyntax.parseDigits(bytes[11..<13]),
            let minute = HTTPSyntax.parseDigits(bytes[14..<16]),
            let second = HTTPSyntax.parseDigits(bytes[17..<19]),
            year >= 1, month >= 1, month <= 12, day >= 1, day <= HTTPDate.daysInMonth(year: year, month: month),
            hour <= 23, minute <= 59, second <= 60
        else { return nil }

        var index = 19
        var nanoseconds: Int64 = 0
        if bytes[index] == UInt8(ascii: ".") {
            index += 1
            let start = index
            while index < bytes.count, HTTPSyntax.isDigit(bytes[index]) {
                if index - start < 9 { nanoseconds = nanoseconds * 10 + Int64(bytes[index] - UInt8(ascii: "0")) }
                index += 1
            }
            guard index > start else { return nil }
            for _ in min(index - start, 9)..<9 { nanoseconds *= 10 }
        }

        guard index < bytes.count else { return nil }
        let offsetSeconds: Int64
        switch bytes[index] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            offsetSeconds = 0
            index += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard bytes.count - index == 6, bytes[index + 3] == UInt8(ascii: ":"),
                let offsetHour = HTTPSyntax.parseDigits(bytes[(index + 1)..<(index + 3)]),
                let offsetMinute = HTTPSyntax.parseDigits(bytes[(index + 4)..<(index + 6)]),
                offsetHour <= 23, offsetMinute <= 59
            else { return nil }
            let magnitude = offsetHour * 3600 + offsetMinute * 60
            offsetSeconds = bytes[index] == UInt8(ascii: "-") ? -magnitude : magnitude
            index += 6
        default:
            return nil
        }
        guard index == bytes.count else { return nil }

        // Local time minus the offset is UTC; every term is small (years have four digits), so nothing overflows.
        let seconds =
            HTTPDate.days(fromYear: year, month: month, day: day) * 86_400 + hour * 3600 + minute * 60 + second
            - offsetSeconds
        return Date(timeIntervalSince1970: Double(seconds) + Double(nanoseconds) / 1e9)
    }

    /// `value` in decimal, left-padded with zeros to `width` digits.
    private static func pad(_ value: Int64, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }
}
