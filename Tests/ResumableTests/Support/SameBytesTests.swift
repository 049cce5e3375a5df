import Foundation
import Synchronization
import Testing

/// The byte comparison every file and body check goes through (`SameBytes.swift`): it passes on equal bytes, and on
/// different ones records exactly one issue that says where they part, at once, where `#expect(a == b)` would spend
/// hours computing a difference of a MiB.
@Suite("Byte comparison", .timeLimit(.minutes(5)))
struct SameBytesTests {
    static let mebibyte = 1 << 20

    /// Two MiBs of bytes that look random and differ nearly everywhere: the worst case for a difference. Made once,
    /// as a debug build makes them slowly.
    static let one = noise(seed: 1)
    static let two = noise(seed: 2)

    /// A MiB of bytes that look random.
    static func noise(seed: UInt64) -> [UInt8] {
        var state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
        return (0..<mebibyte).map { _ in
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return UInt8(truncatingIfNeeded: state >> 24)
        }
    }

    /// The messages of the issues a test body recorded.
    final class Messages: Sendable {
        let list = Mutex<[String]>([])
    }

    /// Runs `body`, which must record issues, and returns the messages of the issues it recorded.
    static func issues(sourceLocation: SourceLocation = #_sourceLocation, _ body: () -> Void) -> [String] {
        let messages = Messages()
        withKnownIssue(sourceLocation: sourceLocation) {
            body()
        } matching: { issue in
            messages.list.withLock { $0.append(issue.comments.map(\.rawValue).joined(separator: "\n")) }
            return true
        }
        return messages.list.withLock { $0 }
    }

    @Test func equalBytesPass() {
        let bytes = Self.one
        #expect(expectSameBytes(bytes, bytes))
        #expect(expectSameBytes(Data(bytes), bytes))
        #expect(expectSameBytes(bytes[10...], Data(bytes[10...])))
        #expect(expectSameBytes([UInt8](), Data()))
        #expect(expectSameBytes(repeatElement(7, count: 1000), [UInt8](repeating: 7, count: 1000)))
        let missing: [UInt8]? = nil
        let none: Data? = nil
        #expect(expectSameBytes(missing, none), "two nils are the same, as with ==")
        let some: Data? = Data(bytes)
        #expect(expectSameBytes(some, bytes))
    }

    /// One byte in the middle of a MiB: one issue, with the lengths, the offset and the bytes around it.
    @Test func oneByteDifferenceIsReportedAtItsOffset() {
        let expected = Self.one
        var actual = expected
        actual[524_288] = ~actual[524_288]
        var passed = true
        let messages = Self.issues { passed = expectSameBytes(actual, expected, "the file") }
        #expect(!passed)
        #expect(messages.count == 1)
        let message = messages.first ?? ""
        #expect(message.hasPrefix("the file: the bytes differ: actual 1048576 bytes, expected 1048576"), "\(message)")
        #expect(message.contains("first difference at offset 524288"), "\(message)")
        let hex = { (byte: UInt8) in byte < 16 ? "0" + String(byte, radix: 16) : String(byte, radix: 16) }
        #expect(message.contains("actual[524280...]: "), "\(message)")
        #expect(message.contains("[\(hex(actual[524_288]))]"), "\(message)")
        #expect(message.contains("[\(hex(expected[524_288]))]"), "\(message)")
        #expect(message.count < 400, "a short message, never the bytes: \(message.count) characters")
    }

    /// Two MiBs that differ nearly everywhere, the case where Swift Testing's difference is quadratic, as `Data`
    /// and as arrays: reported at once, at offset 0.
    @Test func differentMebibytesAreReportedQuickly() {
        let expected = Self.one
        let actual = Self.two
        let start = ContinuousClock.now
        let messages = Self.issues {
            expectSameBytes(actual, expected)
            expectSameBytes(Data(actual), Data(expected))
            expectSameBytes(Data(actual) as Data?, expected)
        }
        // The difference this replaces took 42 s for 20,000 bytes on this machine; a pass over a MiB takes
        // milliseconds. The bound only has to tell the two apart on a busy machine.
        #expect(ContinuousClock.now - start < .seconds(60))
        #expect(messages.count == 3)
        for message in messages {
            #expect(message.hasPrefix("the bytes differ: actual 1048576 bytes, expected 1048576"), "\(message)")
            #expect(message.contains("first difference at offset 0"), "\(message)")
        }
    }

    /// A short file (a cut download) and a long one: the length where the shorter ends.
    @Test func prefixesAreReportedWhereTheShorterEnds() {
        let expected = Self.one
        let messages = Self.issues {
            expectSameBytes(expected[..<1000], expected)
            expectSameBytes(expected, expected[..<1000])
            expectSameBytes([UInt8](), expected)
        }
        #expect(messages.count == 3)
        #expect(messages[0].contains("actual 1000 bytes, expected 1048576"), "\(messages[0])")
        #expect(messages[0].contains("the first 1000 agree, then actual ends"), "\(messages[0])")
        #expect(messages[0].contains("actual[992...]:") && messages[0].contains("(end)"), "\(messages[0])")
        #expect(messages[1].contains("the first 1000 agree, then expected ends"), "\(messages[1])")
        #expect(messages[2].contains("actual 0 bytes"), "\(messages[2])")
        #expect(messages[2].contains("actual[0...]: (end), expected[0...]: ["), "\(messages[2])")
    }

    /// A missing file (`nil` bytes) is a failure that says so.
    @Test func missingBytesAreReported() {
        let expected = Self.one
        let missing: [UInt8]? = nil
        let messages = Self.issues {
            expectSameBytes(missing, expected, "x.bin")
            expectSameBytes(expected, missing)
        }
        #expect(messages.count == 2)
        #expect(messages.first == "x.bin: there are no actual bytes (nil), expected 1048576 bytes")
        #expect(messages.last == "expected no bytes (nil), actual 1048576 bytes")
    }

    /// The `#require` form throws after its one issue, and not on equal bytes.
    @Test func requireThrowsAfterOneIssue() throws {
        let expected = Self.one
        var actual = expected
        actual[1000] = ~actual[1000]
        try requireSameBytes(expected, Data(expected))
        var threw = 0
        let messages = Self.issues {
            do { try requireSameBytes(actual, expected, "x.bin") } catch { threw += 1 }
            do { try requireSameBytes(nil as [UInt8]?, expected) } catch { threw += 1 }
        }
        #expect(threw == 2)
        #expect(messages.count == 2)
        #expect(messages.first?.hasPrefix("x.bin: the bytes differ") == true, "\(messages)")
        #expect(messages.first?.contains("first difference at offset 1000") == true, "\(messages)")
        #expect(messages.last == "there are no actual bytes (nil), expected 1048576 bytes")
    }
}
