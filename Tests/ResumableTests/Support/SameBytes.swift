import Foundation
import Testing

// Comparing downloaded bytes with `#expect(actual == expected)` is a trap. When the two sides are collections of one
// type (`[UInt8]`, `Data`, `ArraySlice<UInt8>`) and differ, Swift Testing computes a difference between them for the
// failure message, in time quadratic in how much of them differs: two 20,000-byte arrays that differ throughout take
// 42 s, a file of a MiB would take days. One failing file comparison would hang the whole run, with no message at all
// until CI's timeout. (Optional sides are not diffed, but print every byte in decimal: megabytes of output.)
//
// These helpers compare in one pass and record one issue that gives the lengths, the first offset where the bytes
// part, and a few bytes around it in hex. Use them for every comparison of bytes that can be larger than a few
// hundred: downloaded files, bodies, temporary files. This file is shared (by symbolic links) with the other test
// targets.

/// Where two byte sequences first part: the failure message of ``expectSameBytes(_:_:_:sourceLocation:)``.
struct ByteMismatch: CustomStringConvertible, Sendable {
    /// How many bytes each side holds.
    let actualCount: Int
    let expectedCount: Int
    /// The first offset where the two differ: the shorter one's length when it is a prefix of the other.
    let offset: Int
    /// The offset of the first byte in the windows.
    let windowStart: Int
    /// The bytes of each side from `windowStart`, up to `ByteMismatch.context` past `offset`.
    let actualWindow: [UInt8]
    let expectedWindow: [UInt8]

    /// How many bytes each window shows on either side of `offset`.
    static let context = 8

    /// How `actual` and `expected` differ, or `nil` when they hold the same bytes.
    init?(_ actual: some Collection<UInt8>, _ expected: some Collection<UInt8>) {
        let found = withBytes(of: actual) { actual in
            withBytes(of: expected) { expected in ByteMismatch(actual, expected) }
        }
        guard let found else { return nil }
        self = found
    }

    private init?(_ actual: UnsafeBufferPointer<UInt8>, _ expected: UnsafeBufferPointer<UInt8>) {
        let common = min(actual.count, expected.count)
        var offset = common
        // memcmp a chunk at a time: this runs on every passing comparison too, in a debug build, on files of MiBs.
        let chunk = 4096
        var start = 0
        while start < common {
            let length = min(chunk, common - start)
            if memcmp(actual.baseAddress! + start, expected.baseAddress! + start, length) != 0 {
                offset = (start..<start + length).first { actual[$0] != expected[$0] }!
                break
            }
            start += length
        }
        if offset == common && actual.count == expected.count { return nil }
        actualCount = actual.count
        expectedCount = expected.count
        self.offset = offset
        windowStart = max(0, offset - Self.context)
        actualWindow = Array(actual[windowStart..<min(actual.count, offset + Self.context + 1)])
        expectedWindow = Array(expected[windowStart..<min(expected.count, offset + Self.context + 1)])
    }

    var description: String {
        var text = "the bytes differ: actual \(actualCount) bytes, expected \(expectedCount)"
        if offset == min(actualCount, expectedCount) {
            let shorter = actualCount < expectedCount ? "actual" : "expected"
            text += "; the first \(offset) agree, then \(shorter) ends"
        } else {
            text += "; first difference at offset \(offset)"
        }
        text += "; actual[\(windowStart)...]: \(hex(actualWindow)), expected[\(windowStart)...]: \(hex(expectedWindow))"
        return text
    }

    /// `bytes` in hex, the byte at `offset` in brackets, and `(end)` where the bytes stop before the window does.
    private func hex(_ bytes: [UInt8]) -> String {
        var words = bytes.enumerated().map { index, byte in
            let word = String(byte, radix: 16)
            let padded = word.count == 1 ? "0" + word : word
            return windowStart + index == offset ? "[\(padded)]" : padded
        }
        if windowStart + bytes.count <= offset + Self.context { words.append("(end)") }
        return words.joined(separator: " ")
    }
}

/// Calls `body` with the bytes of `bytes` in contiguous memory, copying them only if they are not already.
private func withBytes<R>(of bytes: some Collection<UInt8>, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
    if let result = bytes.withContiguousStorageIfAvailable(body) { return result }
    return Array(bytes).withUnsafeBufferPointer(body)
}

/// `comment`, then `detail`, as one comment.
private func joined(_ comment: Comment?, _ detail: String) -> Comment {
    guard let comment, !comment.rawValue.isEmpty else { return Comment(rawValue: detail) }
    return Comment(rawValue: "\(comment.rawValue): \(detail)")
}

/// Expects `actual` to hold exactly the bytes of `expected`, like `#expect(actual == expected)`, but without Swift
/// Testing's quadratic difference: a mismatch records one issue with the lengths and the first differing offset.
/// Returns whether they were the same.
@discardableResult
func expectSameBytes(
    _ actual: some Collection<UInt8>,
    _ expected: some Collection<UInt8>,
    _ comment: @autoclosure () -> Comment? = nil,
    sourceLocation: SourceLocation = #_sourceLocation
) -> Bool {
    guard let mismatch = ByteMismatch(actual, expected) else { return true }
    Issue.record(joined(comment(), mismatch.description), sourceLocation: sourceLocation)
    return false
}

/// ``expectSameBytes(_:_:_:sourceLocation:)`` for sides that may be `nil` (a file that could not be read, a body
/// that never came), with the meaning of `==` on optionals: two `nil`s are the same, a `nil` and bytes are not.
@discardableResult
func expectSameBytes<Actual: Collection<UInt8>, Expected: Collection<UInt8>>(
    _ actual: Actual?,
    _ expected: Expected?,
    _ comment: @autoclosure () -> Comment? = nil,
    sourceLocation: SourceLocation = #_sourceLocation
) -> Bool {
    switch (actual, expected) {
    case (nil, nil):
        return true
    case (let actual?, let expected?):
        return expectSameBytes(actual, expected, comment(), sourceLocation: sourceLocation)
    case (nil, let expected?):
        Issue.record(
            joined(comment(), "there are no actual bytes (nil), expected \(expected.count) bytes"),
            sourceLocation: sourceLocation)
        return false
    case (let actual?, nil):
        Issue.record(
            joined(comment(), "expected no bytes (nil), actual \(actual.count) bytes"), sourceLocation: sourceLocation)
        return false
    }
}

/// ``expectSameBytes(_:_:_:sourceLocation:)`` that, like `try #require(actual == expected)`, throws (ending the
/// test) after recording its one issue.
func requireSameBytes(
    _ actual: some Collection<UInt8>,
    _ expected: some Collection<UInt8>,
    _ comment: @autoclosure () -> Comment? = nil,
    sourceLocation: SourceLocation = #_sourceLocation
) throws {
    guard let mismatch = ByteMismatch(actual, expected) else { return }
    let theBytesAreTheSame = false
    try #require(theBytesAreTheSame, joined(comment(), mismatch.description), sourceLocation: sourceLocation)
}

/// ``requireSameBytes(_:_:_:sourceLocation:)`` for sides that may be `nil`, with the meaning of `==` on optionals.
func requireSameBytes<Actual: Collection<UInt8>, Expected: Collection<UInt8>>(
    _ actual: Actual?,
    _ expected: Expected?,
    _ comment: @autoclosure () -> Comment? = nil,
    sourceLocation: SourceLocation = #_sourceLocation
) throws {
    switch (actual, expected) {
    case (nil, nil):
        return
    case (let actual?, let expected?):
        try requireSameBytes(actual, expected, comment(), sourceLocation: sourceLocation)
    case (nil, let expected?):
        let thereAreActualBytes = false
        try #require(
            thereAreActualBytes, joined(comment(), "there are no actual bytes (nil), expected \(expected.count) bytes"),
            sourceLocation: sourceLocation)
    case (let actual?, nil):
        let thereAreNoActualBytes = false
        try #require(
            thereAreNoActualBytes, joined(comment(), "expected no bytes (nil), actual \(actual.count) bytes"),
            sourceLocation: sourceLocation)
    }
}
