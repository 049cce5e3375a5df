import Foundation

/// The Retry-After header (RFC 9110 §10.2.3): delay-seconds or an HTTP-date.
///
/// `delay-seconds = 1*DIGIT` is parsed as an overflow-checked `Int64` (no sign, no fraction); anything else must be
/// an HTTP-date (RFC 9110 §5.6.7), whose distance from `now` is the delay, never negative. Leading and trailing OWS
/// are trimmed. Values are returned as parsed: capping an absurd delay is the caller's policy.
enum RetryAfter {
    /// The delay a Retry-After value asks for, or nil when the value is malformed.
    ///
    /// Examples: `"120"` is 120 seconds; a date one minute after `now` is 60 seconds; a past date is zero.
    static func delay(_ value: String, now: Date) -> Duration? {
        let bytes = HTTPSyntax.trimmedBytes(value)
        if let first = bytes.first, HTTPSyntax.isDigit(first) {
            return HTTPSyntax.parseDigits(bytes).map { .seconds($0) }
        }
        guard let date = HTTPDate.parse(String(decoding: bytes, as: UTF8.self), now: now) else { return nil }
        let interval = date.timeIntervalSince(now)
        // `interval > 0` is false for NaN; the upper bound keeps `Duration.seconds(_:)` in range for any `now`.
        return interval > 0 ? .seconds(min(interval, 1e18)) : .zero
    }
}
