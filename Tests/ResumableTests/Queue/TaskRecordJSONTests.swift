import Foundation
import Testing

@testable import Resumable

/// `TaskRecord.encodedJSON()` writes a record by hand: it must be byte for byte what `JSONEncoder` with
/// `.sortedKeys` writes (the format records had), and read back as the same record.
@Suite("Task record JSON written by hand")
struct TaskRecordJSONTests {
    private static func encoderJSON(_ record: TaskRecord) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return try encoder.encode(record)
    }

    /// Strings a record or a token may hold, with every kind of character JSON escapes or passes through.
    private static let strings = [
        "plain", "", "with/slashes/", "quote \" backslash \\ end", "tab\tnew\nline\rcr", "bell \u{7} del \u{7F}",
        "\u{0}\u{1}\u{8}\u{B}\u{C}\u{E}\u{1F}", "é ü ß 漢字 🙂", "\u{2028}\u{2029}", "<script>&amp;</script>",
    ]

    private static func token(_ text: String, ranges: [Range<Int64>], optionals: Bool) -> ResumeToken {
        let date = Date(timeIntervalSince1970: 1_796_000_000.125)
        return ResumeToken(
            url: URL(string: "https://example.com/a%20b/f.bin?q=1&r=/x")!,
            originalURL: URL(string: "http://example.com/redirect/%C3%A9")!,
            offset: ranges.isEmpty ? 12_345 : 100, completedRanges: ranges,
            expectedLength: optionals || !ranges.isEmpty ? 1 << 40 : nil,
            etag: optionals ? "W/\"\(text.count)\"" : nil, lastModified: optionals ? text : nil,
            responseDate: optionals ? "Tue, 01 Dec 2026 08:00:00 GMT" : nil, acceptRanges: optionals ? "bytes" : nil,
            tempPath: "/tmp/state/partial/" + TemporaryFileName.make(), suggestedFilename: "f \(text).bin",
            destination: optionals ? "/home/me/\(text)/" : nil, headers: [:],
            expectedSHA256: optionals ? String(repeating: "ab", count: 32) : nil, createdAt: date,
            updatedAt: date.addingTimeInterval(1.5))
    }

    @Test("Every field present or absent, every kind of string: the same bytes as JSONEncoder")
    func sameBytesAsJSONEncoder() throws {
        var checked = 0
        for text in Self.strings {
            for optionals in [false, true] {
                for ranges: [Range<Int64>] in [[], [200..<300], [200..<300, 400..<500]] {
                    for withToken in [false, true] {
                        let record = TaskRecord(
                            id: DownloadQueue.TaskID(), url: URL(string: "https://example.com/dir/\(checked).bin")!,
                            destination: optionals
                                ? .file(URL(fileURLWithPath: "/home/me/\(text)/f.bin"))
                                : .directory(URL(fileURLWithPath: "/home/me/out")),
                            priority: optionals ? -7 : 0, order: optionals ? TaskRecord.maximumOrder : 3,
                            state: optionals ? .failed : .queued,
                            expectedSHA256: optionals ? String(repeating: "0f", count: 32) : nil,
                            token: withToken ? Self.token(text, ranges: ranges, optionals: optionals) : nil,
                            failure: optionals ? "the server answered 503: \(text)" : nil,
                            checkpointedAt: optionals ? Date(timeIntervalSince1970: 1_796_000_001.25) : nil,
                            bytesPerSecond: optionals ? 4_194_304 : nil)
                        let fast = try record.encodedJSON()
                        let reference = try Self.encoderJSON(record)
                        expectSameBytes(
                            fast, reference,
                            "\(String(decoding: fast, as: UTF8.self))\n\(String(decoding: reference, as: UTF8.self))")
                        // Records a reader accepts (no control character in a path or header value; ranges need a
                        // validator).
                        if text == "plain", optionals || ranges.isEmpty {
                            #expect(try JSONDecoder().decode(TaskRecord.self, from: fast) == record)
                        }
                        checked += 1
                    }
                }
            }
        }
        #expect(checked == Self.strings.count * 12)
    }

    @Test("A last token with a final name: the same bytes as JSONEncoder, the same record back")
    func finalNameSameBytes() throws {
        let date = Date(timeIntervalSince1970: 1_796_000_000.125)
        let token = ResumeToken(
            url: URL(string: "https://example.com/f.bin")!, originalURL: URL(string: "https://example.com/f.bin")!,
            offset: 1 << 20, expectedLength: 1 << 20, etag: "\"e\"", lastModified: nil, responseDate: nil,
            acceptRanges: "bytes", tempPath: "/tmp/state/partial/" + TemporaryFileName.make(),
            suggestedFilename: "f.bin", destination: "/home/me/out/", finalName: "f (1).bin", headers: [:],
            createdAt: date, updatedAt: date)
        let record = TaskRecord(
            id: DownloadQueue.TaskID(), url: URL(string: "https://example.com/f.bin")!,
            destination: .directory(URL(fileURLWithPath: "/home/me/out")), priority: 0, order: 1, state: .queued,
            token: token)
        let fast = try record.encodedJSON()
        #expect(fast == (try Self.encoderJSON(record)), "\(String(decoding: fast, as: UTF8.self))")
        #expect(try JSONDecoder().decode(TaskRecord.self, from: fast) == record)
    }

    @Test("A token with request headers goes through JSONEncoder: the same bytes, the same record back")
    func headersThroughJSONEncoder() throws {
        let date = Date(timeIntervalSince1970: 1_796_000_000)
        let token = ResumeToken(
            url: URL(string: "http://127.0.0.1:9/f.bin")!, originalURL: URL(string: "http://127.0.0.1:9/f.bin")!,
            offset: 10, expectedLength: 100, etag: "\"e\"", lastModified: nil, responseDate: nil, acceptRanges: nil,
            tempPath: "/tmp/partial/" + TemporaryFileName.make(), suggestedFilename: "f.bin", destination: nil,
            headers: ["X-Trace": "a/b", "accept": "*/*", "Zeta": "z"], createdAt: date, updatedAt: date)
        let record = TaskRecord(
            id: DownloadQueue.TaskID(), url: URL(string: "http://127.0.0.1:9/f.bin")!,
            destination: .directory(URL(fileURLWithPath: "/tmp/out")), priority: 1, order: 2, state: .paused,
            token: token)
        #expect(try record.encodedJSON() == Self.encoderJSON(record))
        #expect(try JSONDecoder().decode(TaskRecord.self, from: record.encodedJSON()) == record)
    }
}
