import Foundation

/// HTTP-date parsing and formatting (RFC 9110 §5.6.7).
///
/// Parsing accepts the three formats of §5.6.7, after trimming leading and trailing OWS:
/// - IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`;
/// - obsolete RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT`;
/// - obsolete asctime: `Sun Nov  6 08:49:37 1994` (the day is `SP DIGIT` or `2DIGIT`).
///
/// Names are case-sensitive and every field has its exact ABNF width. Ranges are validated: the day must exist in
/// its month (leap years follow the proleptic Gregorian calendar), hour 0–23, minute 0–59, second 0–60. A leap
/// second (`:60`) is accepted and lands on the first second of the next minute, as POSIX time has no leap seconds.
/// The day name must be a valid name, but it is not checked against the date: §5.6.7 makes it redundant, and
/// senders that get it wrong are better served by the date they meant than by no date at all. The first two
/// formats require the literal `GMT`; asctime carries no zone and is read as UTC.
///
/// No `DateFormatter` is involved: fields are read by position and the instant is computed arithmetically
/// (days from civil), which is fast and independent of locale and time zone settings.
enum HTTPDate {
    private static let shortDayNames = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let longDayNames = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
    private static let monthNames = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]

    /// Seconds from 1970 of 0001-01-01T00:00:00Z, the earliest instant `format` writes.
    private static let earliestFormattable: Int64 = -62_135_596_800
    /// Seconds from 1970 of 9999-12-31T23:59:59Z, the latest instant `format` writes.
    private static let latestFormattable: Int64 = 253_402_300_799

    /// Parses an HTTP-date; returns nil when it is malformed or names an impossible date or time.
    ///
    /// Two-digit RFC 850 years are resolved against the current date; see `parse(_:now:)`.
    static func parse(_ value: String) -> Date? {
        parse(value, now: Date())
    }

    /// Parses an HTTP-date, resolving two-digit RFC 850 years against `now`.
    ///
    /// RFC 9110 §5.6.7: a two-digit year that appears to be more than 50 years in the future is the most recent
    /// past year with the same last two digits. The year chosen is therefore the one ending in those digits within
    /// `currentYear - 49 ... currentYear + 50`.
    static func parse(_ value: String, now: Date) -> Date? {
        let bytes = Array(HTTPSyntax.trimmedBytes(value))
        guard bytes.count > 3 else { return nil }
        if bytes[3] == UInt8(ascii: ",") {
            return parseIMFFixdate(bytes)
        } else if bytes[3] == UInt8(ascii: " ") {
            return parseAsctime(bytes)
        } else {
            return parseRFC850(bytes, now: now)
        }
    }

    /// Formats `date` as an IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    ///
    /// Fractional seconds are truncated toward the past. Instants outside years 0001–9999, which the 4-digit year
    /// cannot express, are clamped to that range.
    static func format(_ date: Date) -> String {
        let seconds = min(max(unixSeconds(date), earliestFormattable), latestFormattable)
        let (days, secondOfDay) = floorDivide(seconds, by: 86_400)
        let (year, month, day) = civil(fromDays: days)
        let weekday = Int(floorDivide(days + 4, by: 7).remainder)
        let hour = secondOfDay / 3600
        let minute = secondOfDay % 3600 / 60
        let second = secondOfDay % 60
        return "\(shortDayNames[weekday]), \(pad(day, 2)) \(monthNames[Int(month) - 1]) \(pad(year, 4)) "
            + "\(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2)) GMT"
    }

    // MARK: - Formats

    /// `day-name "," SP 2DIGIT SP month SP 4DIGIT SP time-of-day SP "GMT"`, exactly 29 bytes.
    private static func parseIMFFixdate(_ bytes: [UInt8]) -> Date? {
        guard bytes.count == 29,
            shortDayNames.contains(where: { bytes[0..<3].elementsEqual($0.utf8) }),
            bytes[4] == UInt8(ascii: " "), bytes[7] == UInt8(ascii: " "), bytes[11] == UInt8(ascii: " "),
            bytes[16] == UInt8(ascii: " "), bytes[25] == UInt8(ascii: " "),
            bytes[26...].elementsEqual("GMT".utf8),
            let day = HTTPSyntax.parseDigits(bytes[5..<7]),
            let month = month(bytes[8..<11]),
            let year = HTTPSyntax.parseDigits(bytes[12..<16])
        else { return nil }
        return makeDate(year: year, month: month, day: day, time: bytes[17..<25])
    }

    /// `day-name-l "," SP 2DIGIT "-" month "-" 2DIGIT SP time-of-day SP "GMT"`.
    private static func parseRFC850(_ bytes: [UInt8], now: Date) -> Date? {
        guard let comma = bytes.firstIndex(of: UInt8(ascii: ",")),
            longDayNames.contains(where: { bytes[0..<comma].elementsEqual($0.utf8) })
        else { return nil }
        let rest = Array(bytes[(comma + 1)...])
        guard rest.count == 23,
            rest[0] == UInt8(ascii: " "), rest[3] == UInt8(ascii: "-"), rest[7] == UInt8(ascii: "-"),
            rest[10] == UInt8(ascii: " "), rest[19] == UInt8(ascii: " "),
            rest[20...].elementsEqual("GMT".utf8),
            let day = HTTPSyntax.parseDigits(rest[1..<3]),
            let month = month(rest[4..<7]),
            let twoDigitYear = HTTPSyntax.parseDigits(rest[8..<10])
        else { return nil }
        let year = resolveTwoDigitYear(twoDigitYear, now: now)
        return makeDate(year: year, month: month, day: day, time: rest[11..<19])
    }

    /// `day-name SP month SP ( 2DIGIT / ( SP DIGIT ) ) SP time-of-day SP 4DIGIT`, exactly 24 bytes.
    private static func parseAsctime(_ bytes: [UInt8]) -> Date? {
        guard bytes.count == 24,
            shortDayNames.contains(where: { bytes[0..<3].elementsEqual($0.utf8) }),
            bytes[7] == UInt8(ascii: " "), bytes[10] == UInt8(ascii: " "), bytes[19] == UInt8(ascii: " "),
            let month = month(bytes[4..<7]),
            let year = HTTPSyntax.parseDigits(bytes[20..<24])
        else { return nil }
        let dayBytes = bytes[8] == UInt8(ascii: " ") ? bytes[9..<10] : bytes[8..<10]
        guard let day = HTTPSyntax.parseDigits(dayBytes) else { return nil }
        return makeDate(year: year, month: month, day: day, time: bytes[11..<19])
    }

    // MARK: - Fields

    /// The month number 1–12 of a three-letter, case-sensitive month name.
    private static func month(_ bytes: ArraySlice<UInt8>) -> Int64? {
        monthNames.firstIndex(where: { bytes.elementsEqual($0.utf8) }).map { Int64($0 + 1) }
    }

    /// Validates the fields and returns the instant, reading `time` as `2DIGIT ":" 2DIGIT ":" 2DIGIT`.
    private static func makeDate(year: Int64, month: Int64, day: Int64, time: ArraySlice<UInt8>) -> Date? {
        let start = time.startIndex
        guard time.count == 8,
            time[start + 2] == UInt8(ascii: ":"), time[start + 5] == UInt8(ascii: ":"),
            let hour = HTTPSyntax.parseDigits(time[start..<start + 2]),
            let minute = HTTPSyntax.parseDigits(time[start + 3..<start + 5]),
            let second = HTTPSyntax.parseDigits(time[start + 6..<start + 8]),
            hour <= 23, minute <= 59, second <= 60,
            day >= 1, day <= daysInMonth(year: year, month: month)
        else { return nil }
        let seconds = days(fromYear: year, month: month, day: day) * 86_400 + hour * 3600 + minute * 60 + second
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// The four-digit year for an RFC 850 two-digit year, per RFC 9110 §5.6.7.
    private static func resolveTwoDigitYear(_ twoDigitYear: Int64, now: Date) -> Int64 {
        let currentYear = civil(fromDays: floorDivide(unixSeconds(now), by: 86_400).quotient).year
        let currentTwoDigits = floorDivide(currentYear, by: 100).remainder
        let candidate = currentYear + floorDivide(twoDigitYear - currentTwoDigits, by: 100).remainder
        return candidate > currentYear + 50 ? candidate - 100 : candidate
    }

    // MARK: - Calendar arithmetic (shared with `ISO8601`)

    /// Whether `year` is a leap year in the proleptic Gregorian calendar.
    static func isLeapYear(_ year: Int64) -> Bool {
        (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
    }

    /// The number of days in `month` (1–12) of `year`.
    static func daysInMonth(year: Int64, month: Int64) -> Int64 {
        switch month {
        case 2: isLeapYear(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
    static func days(fromYear year: Int64, month: Int64, day: Int64) -> Int64 {
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = floorDivide(shiftedYear, by: 400).quotient
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's `civil_from_days`).
    static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let shifted = days + 719_468
        let era = floorDivide(shifted, by: 146_097).quotient
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// Division rounding toward negative infinity, with a remainder in `0..<divisor` (`divisor` > 0).
    static func floorDivide(_ value: Int64, by divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        let remainder = value % divisor
        return remainder < 0 ? (value / divisor - 1, remainder + divisor) : (value / divisor, remainder)
    }

    /// Whole seconds since 1970 (rounded toward the past), clamped to ±10^13 so that no conversion can trap.
    private static func unixSeconds(_ date: Date) -> Int64 {
        let limit = 1e13
        let seconds = date.timeIntervalSince1970
        guard seconds.isFinite else { return seconds > 0 ? Int64(limit) : -Int64(limit) }
        return Int64(min(max(seconds.rounded(.down), -limit), limit))
    }

    /// `value` in decimal, left-padded with zeros to `width` digits.
    private static func pad(_ value: Int64, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }
}
