// Hostile values for fuzz tests: a seeded, reproducible generator of extreme and malformed input.
//
// API overview (everything is internal to the test target):
//
// - `SplitMix64(seed:)`: a `RandomNumberGenerator` (Steele, Lea and Flood's SplitMix64); the same seed gives the
//   same sequence on every platform and run.
// - `FuzzSettings`: `seed` reads `RESUMABLE_FUZZ_SEED` (decimal or `0x` hex; default `defaultSeed`), `totalCases`
//   reads `RESUMABLE_FUZZ_CASES` (default 100,000); `cases(share:)` is a target's part of the total.
// - `FuzzCampaign(target:cases:)`: runs `cases` cases of one fuzz target. Each case gets its own `HostileValues`
//   derived from (seed, target, case index), so a case replays alone with `HostileValues(seed:target:case:)`.
//   The body reports violations with `FuzzCase.check(_:_:)`, whose issues always name the target, the seed and
//   the case index; after 20 recorded issues the rest are only counted. The campaign prints its seed before it
//   starts, so a trap (which no test can catch) still leaves the seed in the log; with `RESUMABLE_FUZZ_TRACE=1`
//   it also writes each case's label to standard error before running it, so the last line names the case that
//   trapped, and `RESUMABLE_FUZZ_CASE=<index>` runs that one case alone (of every campaign), e.g. in a debugger.
// - `HostileValues`: the generator. Primitives: `int64()`, `nonNegativeInt64()`, `int()`, `double()`,
//   `duration()`, `date()`, `digits()`, `numberText()`, `string()`, `bytes()`, `pick(_:)`, `chance(_:)`,
//   `below(_:)`. Mutation: `mutate(_: String)`, `mutateBytes(_:)` (flip, replace with delimiters, insert hostile
//   pieces, delete, duplicate, truncate, swap a run of digits for an extreme number). Structured values:
//   `contentRange()`, `httpDate()`, `entityTag()`, `contentDisposition()`, `retryAfter()`, `headerName()`,
//   `url()`, `isoDate()`, `fileName()`, `headerValue(seeds:generate:)` (a mutated seed, a structured value or
//   junk). JSON: `HostileJSON` (decodes any JSON, keys sorted; serializes with raw number text so numbers beyond
//   `Int64` survive), `json(depth:)` and `mutateJSONObject(_:keys:)` (set fields to extreme numbers, wrong types,
//   long strings, nested junk; remove or add fields), `jsonData(from:keys:)` (that, sometimes with the bytes
//   mutated too).
//
// Example, for a state machine:
//
//     FuzzCampaign(target: "stateMachine", cases: FuzzSettings.cases(share: 0.2)).run { values, fuzzCase in
//         let header = values.headerValue(seeds: ["bytes 0-9/10"]) { $0.contentRange() }
//         fuzzCase.check(someInvariant(header), "input \(header.debugDescription)")
//     }

import Foundation
import Testing

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and the same sequence for the same seed everywhere.
struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var mixed = state
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        return mixed ^ (mixed >> 31)
    }

    /// `value` scrambled: used to derive independent seeds from (seed, target, case).
    static func mix(_ value: UInt64) -> UInt64 {
        var generator = SplitMix64(seed: value)
        return generator.next()
    }
}

/// The fuzz environment: `RESUMABLE_FUZZ_SEED` and `RESUMABLE_FUZZ_CASES`.
enum FuzzSettings {
    /// The seed when `RESUMABLE_FUZZ_SEED` is not set.
    static let defaultSeed: UInt64 = 0x5EED_0008_2026

    /// The total number of cases when `RESUMABLE_FUZZ_CASES` is not set.
    static let defaultTotalCases = 100_000

    /// `RESUMABLE_FUZZ_SEED` (decimal, or hexadecimal with `0x`), else `defaultSeed`.
    static let seed: UInt64 = {
        guard
            let text = ProcessInfo.processInfo.environment["RESUMABLE_FUZZ_SEED"]?.trimmingCharacters(
                in: .whitespaces), !text.isEmpty
        else { return defaultSeed }
        let parsed =
            text.lowercased().hasPrefix("0x") ? UInt64(text.dropFirst(2), radix: 16) : UInt64(text, radix: 10)
        guard let parsed else {
            print("RESUMABLE_FUZZ_SEED='\(text)' is not a number; using the default seed \(hex(defaultSeed))")
            return defaultSeed
        }
        return parsed
    }()

    /// `RESUMABLE_FUZZ_CASES`, else `defaultTotalCases`: how many cases a whole fuzz suite runs.
    static let totalCases: Int = {
        guard let text = ProcessInfo.processInfo.environment["RESUMABLE_FUZZ_CASES"], let number = Int(text),
            number >= 0
        else { return defaultTotalCases }
        return number
    }()

    /// `RESUMABLE_FUZZ_TRACE`: whether campaigns write each case's label to standard error before running it.
    static let trace = !(ProcessInfo.processInfo.environment["RESUMABLE_FUZZ_TRACE"] ?? "").isEmpty

    /// `RESUMABLE_FUZZ_CASE`: the only case index to run, when set.
    static let onlyCase = ProcessInfo.processInfo.environment["RESUMABLE_FUZZ_CASE"].flatMap { Int($0) }

    /// A target's part of `totalCases`, at least one case.
    static func cases(share: Double) -> Int {
        max(1, Int((Double(totalCases) * share).rounded(.up)))
    }

    static func hex(_ value: UInt64) -> String {
        "0x" + String(value, radix: 16)
    }
}

/// One case of a campaign: where violations are reported.
struct FuzzCase {
    let target: String
    let seed: UInt64
    let index: Int
    fileprivate(set) var failures: [(message: String, location: SourceLocation)] = []

    /// The target, seed and case index, in every message.
    var label: String {
        "fuzz \(target) RESUMABLE_FUZZ_SEED=\(FuzzSettings.hex(seed)) case \(index)"
    }

    /// Records a violation, with the label, unless `condition` holds.
    mutating func check(
        _ condition: Bool, _ message: @autoclosure () -> String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        if !condition { fail(message(), sourceLocation: sourceLocation) }
    }

    /// Records a violation.
    mutating func fail(_ message: String, sourceLocation: SourceLocation = #_sourceLocation) {
        failures.append((message, sourceLocation))
    }
}

/// Runs the cases of one fuzz target.
struct FuzzCampaign {
    /// The target's name; it also separates the targets' random streams.
    let target: String
    /// How many cases to run.
    let cases: Int
    /// The base seed.
    let seed: UInt64

    init(target: String, cases: Int, seed: UInt64 = FuzzSettings.seed) {
        self.target = target
        self.cases = cases
        self.seed = seed
    }

    /// Runs `body` once per case and records at most 20 issues; returns the number of failed cases.
    ///
    /// The cases run on a thread of their own, not on the cooperative pool: a campaign is seconds of CPU, and on a
    /// two-core machine two campaigns on the pool's two threads would starve every other test of the parallel run
    /// (CI once saw unrelated one-millisecond tests exceed a one-minute time limit). Issues are recorded afterwards,
    /// on the test's own task, where Swift Testing attributes them.
    @discardableResult
    func run(_ body: @escaping @Sendable (inout HostileValues, inout FuzzCase) -> Void) async -> Int {
        let seedText = FuzzSettings.hex(seed)
        let indices = FuzzSettings.onlyCase.map { $0..<($0 + 1) } ?? 0..<cases
        print("fuzz \(target): \(indices.count) cases, RESUMABLE_FUZZ_SEED=\(seedText)")
        let (target, seed) = (self.target, self.seed)
        let outcome: Outcome = await withCheckedContinuation { continuation in
            let thread = Thread {
                let start = ContinuousClock.now
                let startCPU = Self.threadCPUSeconds()
                var outcome = Outcome()
                for index in indices {
                    var values = HostileValues(seed: seed, target: target, case: index)
                    var fuzzCase = FuzzCase(target: target, seed: seed, index: index)
                    if FuzzSettings.trace { FileHandle.standardError.write(Data((fuzzCase.label + "\n").utf8)) }
                    body(&values, &fuzzCase)
                    guard !fuzzCase.failures.isEmpty else { continue }
                    outcome.failedCases += 1
                    for failure in fuzzCase.failures where outcome.failures.count < 20 {
                        outcome.failures.append((fuzzCase.label, failure.message, failure.location))
                    }
                }
                outcome.wall = ContinuousClock.now - start
                outcome.cpuSeconds = Self.threadCPUSeconds() - startCPU
                continuation.resume(returning: outcome)
            }
            thread.name = "fuzz \(target)"
            thread.stackSize = 8 << 20
            thread.start()
        }
        for failure in outcome.failures {
            Issue.record("\(failure.label): \(failure.message)", sourceLocation: failure.location)
        }
        if outcome.failedCases > 0 {
            Issue.record(
                "fuzz \(target) RESUMABLE_FUZZ_SEED=\(seedText): \(outcome.failedCases) of \(indices.count) cases failed"
            )
        }
        let cpu = String(format: "%.2f", outcome.cpuSeconds)
        print(
            "fuzz \(target): \(indices.count) cases in \(outcome.wall) (\(cpu) s CPU), RESUMABLE_FUZZ_SEED=\(seedText)")
        return outcome.failedCases
    }

    /// What a campaign's thread hands back.
    private struct Outcome: @unchecked Sendable {
        // @unchecked: built on the campaign's thread and handed over once, through the continuation.
        var failedCases = 0
        var failures: [(label: String, message: String, location: SourceLocation)] = []
        var wall: Duration = .zero
        var cpuSeconds = 0.0
    }

    /// CPU time of the calling thread: wall time says little on a loaded machine.
    private static func threadCPUSeconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}

/// A JSON value as text: numbers keep their raw spelling, so `9223372036854775808` or `1e400` can be written.
indirect enum HostileJSON: Decodable, Sendable, Equatable {
    case null
    case bool(Bool)
    case number(String)
    case string(String)
    case array([HostileJSON])
    /// Members in order; duplicate keys are allowed (and hostile).
    case object([Member])

    struct Member: Sendable, Equatable {
        var key: String
        var value: HostileJSON
    }

    private struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    init(from decoder: any Decoder) throws {
        if let keyed = try? decoder.container(keyedBy: AnyKey.self) {
            // Sorted: the decoder's key order is not specified, and the fuzz streams must be reproducible.
            self = .object(
                try keyed.allKeys.map(\.stringValue).sorted().map { key in
                    Member(key: key, value: try keyed.decode(HostileJSON.self, forKey: AnyKey(stringValue: key)))
                })
            return
        }
        if var unkeyed = try? decoder.unkeyedContainer() {
            var elements: [HostileJSON] = []
            while !unkeyed.isAtEnd { elements.append(try unkeyed.decode(HostileJSON.self)) }
            self = .array(elements)
            return
        }
        let single = try decoder.singleValueContainer()
        if single.decodeNil() {
            self = .null
        } else if let bool = try? single.decode(Bool.self) {
            self = .bool(bool)
        } else if let integer = try? single.decode(Int64.self) {
            self = .number(String(integer))
        } else if let double = try? single.decode(Double.self) {
            self = .number(String(double))
        } else {
            self = .string(try single.decode(String.self))
        }
    }

    /// The JSON text.
    var serialized: String {
        String(decoding: serializedBytes, as: UTF8.self)
    }

    /// The JSON text as UTF-8.
    var serializedBytes: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(512)
        write(into: &bytes)
        return bytes
    }

    private func write(into bytes: inout [UInt8]) {
        switch self {
        case .null: bytes += "null".utf8
        case .bool(let value): bytes += (value ? "true" : "false").utf8
        case .number(let text): bytes += text.utf8
        case .string(let text): Self.writeQuoted(text, into: &bytes)
        case .array(let elements):
            bytes.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                element.write(into: &bytes)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let members):
            bytes.append(UInt8(ascii: "{"))
            for (index, member) in members.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                Self.writeQuoted(member.key, into: &bytes)
                bytes.append(UInt8(ascii: ":"))
                member.value.write(into: &bytes)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// `text` as a JSON string literal.
    static func quoted(_ text: String) -> String {
        var bytes: [UInt8] = []
        writeQuoted(text, into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func writeQuoted(_ text: String, into bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        // Most strings need no escape: copy them whole (a plain loop: this runs in debug builds, and often).
        let copied = text.utf8.withContiguousStorageIfAvailable { buffer -> Bool in
            var index = 0
            while index < buffer.count {
                let byte = buffer[index]
                if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { return false }
                index += 1
            }
            bytes.append(contentsOf: buffer)
            return true
        }
        if copied != true {
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes += [UInt8(ascii: "\\"), byte]
                case 0x0A: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
                case 0x0D: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
                case 0x09: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
                case ..<0x20:
                    bytes += "\\u00".utf8
                    bytes += [hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0xF)]]
                default: bytes.append(byte)
                }
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// The member `key` of an object.
    subscript(key: String) -> HostileJSON? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }
}

/// A seeded generator of extreme, random and malformed values.
struct HostileValues {
    private var generator: SplitMix64

    init(seed: UInt64) {
        generator = SplitMix64(seed: seed)
    }

    /// The generator of one case of a campaign.
    init(seed: UInt64, target: String, case index: Int) {
        // FNV-1a of the target name, so each target has its own stream.
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in target.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        self.init(seed: SplitMix64.mix(SplitMix64.mix(seed ^ hash) &+ UInt64(truncatingIfNeeded: index)))
    }

    // MARK: - Primitives

    /// A random integer in `0..<bound` (`bound` > 0); the modulo bias is irrelevant here, the speed is not.
    mutating func below(_ bound: Int) -> Int {
        Int(truncatingIfNeeded: generator.next() % UInt64(bound))
    }

    /// True with probability `probability`.
    mutating func chance(_ probability: Double) -> Bool {
        Double(generator.next() >> 11) * 0x1p-53 < probability
    }

    /// A random element of a non-empty array.
    mutating func pick<Element>(_ elements: [Element]) -> Element {
        elements[below(elements.count)]
    }

    /// 64 random bits.
    mutating func bits() -> UInt64 {
        generator.next()
    }

    static let extremeIntegers: [Int64] = [
        0, 1, -1, 2, -2, 9, 10, 99, 100, 255, 256, 1023, 1024, 65_535, 65_536,
        Int64(Int32.max), Int64(Int32.max) + 1, Int64(Int32.min), Int64(UInt32.max), Int64(UInt32.max) + 1,
        1 << 53, (1 << 53) + 1, 999_999_999_999_999, 1_000_000_000_000_000, 9_223_372_036_854_775,
        9_223_372_036_854_776, 10_000_000_000_000_000, 92_233_720_368_547_758, 1_000_000_000_000_000_000,
        .max, .max - 1, .max / 2, .max / 10, .max / 1000, .min, .min + 1, .min / 2,
    ]

    /// An integer biased to boundaries: extremes (±1), powers of two (±1), small numbers, or uniform.
    mutating func int64() -> Int64 {
        switch below(10) {
        case 0, 1, 2:
            return pick(Self.extremeIntegers) &+ Int64(below(3) - 1)
        case 3, 4:
            let power = Int64(1) << Int64(below(63))
            let value = power &+ Int64(below(3) - 1)
            return chance(0.3) ? 0 &- value : value
        case 5, 6:
            return Int64(below(1000))
        default:
            return Int64(bitPattern: bits())
        }
    }

    /// A non-negative integer with the same bias.
    mutating func nonNegativeInt64() -> Int64 {
        let value = int64()
        return value == .min ? .max : abs(value)
    }

    /// An `Int` with the same bias.
    mutating func int() -> Int {
        Int(truncatingIfNeeded: int64())
    }

    static let extremeDoubles: [Double] = [
        0, -0.0, 1, -1, 0.5, 0.001, 0.0005, .nan, -.nan, .signalingNaN, .infinity, -.infinity,
        .greatestFiniteMagnitude, -.greatestFiniteMagnitude, .leastNonzeroMagnitude, -.leastNonzeroMagnitude,
        .leastNormalMagnitude, .ulpOfOne, 0x1p63, -0x1p63, 0x1p63.nextDown, 0x1p63.nextUp, 0x1p64, 0x1p53,
        0x1p127, 9.2e15, 9.3e15, 1e9, 1e12, 1e13, 1e16, 1e18, 1e19, 1e20, 1e300, -1e300, 1e-300, 86_400, 86_400.0001,
    ]

    /// A double: special values (NaN, ±infinity, ±0, extremes, 2^63 and its neighbours), integers, or raw bits.
    mutating func double() -> Double {
        switch below(6) {
        case 0, 1: return pick(Self.extremeDoubles)
        case 2: return Double(int64())
        case 3: return Double(bitPattern: bits())
        default: return Double.random(in: -1...1, using: &generator) * pow(10, Double(below(40) - 10))
        }
    }

    /// A duration: any `Int64` of seconds, milliseconds or nanoseconds, negative ones, and durations far beyond
    /// `Int64.max` seconds (where `Duration.components` traps).
    mutating func duration() -> Duration {
        switch below(8) {
        case 0: return .seconds(int64())
        case 1: return .milliseconds(int64())
        case 2: return .nanoseconds(int64())
        case 3: return .seconds(Int64.max) * (1 + below(18))
        case 4: return .seconds(Int64.min) * (1 + below(18))
        case 5: return Duration(secondsComponent: int64(), attosecondsComponent: int64() % 1_000_000_000_000_000_000)
        case 6:
            let edges: [Duration] = [
                .zero, .milliseconds(Int64.max), .milliseconds(Int64.min), .seconds(Int64.max), .seconds(Int64.min),
                .seconds(1_000_000_000), .seconds(86_400), .milliseconds(250), .seconds(5),
            ]
            let nudge: Duration = .nanoseconds(below(3) - 1)
            return pick(edges) + nudge
        default: return .milliseconds(below(100_000))
        }
    }

    /// A date from any double of seconds since 1970 (NaN and infinities included), or a plausible one.
    mutating func date() -> Date {
        chance(0.5)
            ? Date(timeIntervalSince1970: double())
            : Date(timeIntervalSince1970: Double(below(4_000_000_000)) - 1_000_000_000)
    }

    static let extremeDigitStrings = [
        "0", "00", "000000000000000000000000000000000001", "9223372036854775806", "9223372036854775807",
        "9223372036854775808", "9223372036854775809", "18446744073709551615", "18446744073709551616",
        "99999999999999999999999999999999999999", "10000000000000000", "9999999999999999", "4294967296",
        "2147483648", "1",
    ]

    /// A run of ASCII digits: boundaries of `Int64` and `UInt64`, leading zeros, or random lengths up to 40.
    mutating func digits() -> String {
        switch below(4) {
        case 0: return pick(Self.extremeDigitStrings)
        case 1: return String(nonNegativeInt64())
        case 2: return String((0..<(1 + below(40))).map { _ in Character(String(below(10))) })
        default: return String(below(1000))
        }
    }

    static let oddNumbers = [
        "", " ", "-0", "+0", "-1", "+1", "1.5", "0.5", ".5", "5.", "1e3", "1E18", "1e309", "-1e309", "1e-400", "nan",
        "NaN", "inf", "-inf", "infinity", "0x10", "0x1p-1074", "0x1p63", "1_000", "1,000", " 1", "1 ", "\t1",
        "1\u{0}", "١٢٣", "１２", "Ⅻ", "٫", "--1", "+-1", "1-", "0b101", "0o17", "1/2", "∞", "-", "+", ".", "e",
    ]

    /// Text that may or may not be a number: extreme digits with signs, fractions, exponents, hex, Unicode digits.
    mutating func numberText() -> String {
        switch below(5) {
        case 0: return pick(Self.oddNumbers)
        case 1: return pick(["-", "+", ""]) + digits()
        case 2: return digits() + pick([".", "e", "E", ".5", "e-5", "e+400", "0"]) + (chance(0.5) ? digits() : "")
        case 3: return String(int64())
        default: return digits()
        }
    }

    static let hostilePieces = [
        "", " ", "  ", "\t", "\r\n", "\n", "\r", "\u{0}", "\u{1}", "\u{7}", "\u{1B}[31m", "\u{7F}", "\u{80}",
        "\u{85}", "\u{9F}", "\u{A0}", "\u{3000}", "\u{2028}", "\u{2029}", "\u{200B}", "\u{200E}", "\u{202E}",
        "\u{2066}", "\u{FEFF}", "\u{FFFD}", "\u{FFFF}", "\u{10FFFF}", "é", "e\u{301}", "\u{301}", "ß", "İ", "ﬃ",
        "Σ", "ς", "日本語", "한국어", "עברית", "العربية", "👨‍👩‍👧‍👦", "🇺🇳", "\u{1F600}", "/", "//", "\\", ".", "..", "../",
        "./", "~", "\"", "'", "`", ";", ",", "=", "*", "-", ":", "%", "%00", "%zz", "%2F", "%2e%2e", "%ff", "%",
        "W/", "bytes", "GMT", "UTF-8''", "iso-8859-1'en'", "filename", "filename*", "{", "}", "[", "]", "null",
        "true", "\\u0000", "\\", "<script>", "$(rm -rf /)", "C:\\", "CON", "aux.txt", "\u{D7FF}", "\u{E000}",
    ]

    /// A hostile string: empty, whitespace, controls, non-ASCII, path and header delimiters, numbers, random
    /// scalars, lossily decoded bytes, and now and then a very long one.
    mutating func string() -> String {
        // Very long, one in 200: up to some tens of kilobytes.
        if below(200) == 0 {
            return String(repeating: pick(Self.hostilePieces + ["a", "0"]), count: 1 + below(5_000))
        }
        switch below(20) {
        case 0: return ""
        case 1, 2:
            let piece = pick([" ", "\t", "\u{A0}", "a", "/", "..", "é", "\u{0}", "9", "%", "\"", ";"])
            return String(repeating: piece, count: 1 + below(300))
        case 3: return String(decoding: bytes(maximumCount: 64), as: UTF8.self)
        case 4:
            var text = ""
            for _ in 0..<(1 + below(16)) {
                let value = UInt32(pick([below(0x80), below(0x800), below(0x1_0000), below(0x11_0000)]))
                if let scalar = Unicode.Scalar(value) { text.unicodeScalars.append(scalar) }
            }
            return text
        case 5: return numberText()
        case 6, 7: return pick(Self.hostilePieces)
        default:
            var text = ""
            for _ in 0..<(1 + below(8)) {
                text += chance(0.7) ? pick(Self.hostilePieces) : pick(["a", "file", "x.txt", "0", digits()])
            }
            return text
        }
    }

    /// Random bytes, biased to ASCII delimiters, controls and bytes that start or break UTF-8 sequences.
    mutating func bytes(maximumCount: Int) -> [UInt8] {
        (0..<below(maximumCount + 1)).map { _ in byte() }
    }

    static let specialBytes: [UInt8] = [
        0x00, 0x09, 0x0A, 0x0D, 0x20, 0x22, 0x25, 0x27, 0x2A, 0x2C, 0x2D, 0x2E, 0x2F, 0x30, 0x39, 0x3A, 0x3B, 0x3D,
        0x5C, 0x7F, 0x80, 0xBF, 0xC0, 0xC3, 0xE2, 0xED, 0xF0, 0xF4, 0xF8, 0xFE, 0xFF,
    ]

    /// One byte: special, printable ASCII, or anything.
    mutating func byte() -> UInt8 {
        switch below(3) {
        case 0: return pick(Self.specialBytes)
        case 1: return UInt8(0x20 + below(0x5F))
        default: return UInt8(truncatingIfNeeded: bits())
        }
    }

    // MARK: - Mutation

    /// `text` with one to four byte-level mutations, decoded lossily as UTF-8.
    mutating func mutate(_ text: String) -> String {
        String(decoding: mutateBytes(Array(text.utf8)), as: UTF8.self)
    }

    /// `input` with one to four mutations: a flipped bit, a byte replaced by a delimiter or control, a hostile
    /// piece or extreme number inserted, a range deleted or duplicated, a truncation, or a run of digits replaced
    /// by an extreme number. The result may be invalid UTF-8.
    mutating func mutateBytes(_ input: [UInt8]) -> [UInt8] {
        var bytes = input
        for _ in 0..<(1 + below(4)) {
            let position = below(bytes.count + 1)
            switch below(9) {
            case 0 where !bytes.isEmpty:
                let index = min(position, bytes.count - 1)
                bytes[index] ^= UInt8(1) << UInt8(below(8))
            case 1 where !bytes.isEmpty:
                bytes[min(position, bytes.count - 1)] = byte()
            case 2:
                bytes.insert(contentsOf: Array(pick(Self.hostilePieces).utf8), at: position)
            case 3:
                bytes.insert(contentsOf: Array((chance(0.5) ? digits() : numberText()).utf8), at: position)
            case 4 where !bytes.isEmpty:
                let end = min(bytes.count, position + 1 + below(8))
                bytes.removeSubrange(min(position, end)..<end)
            case 5 where !bytes.isEmpty && bytes.count < 100_000:
                let start = min(position, bytes.count - 1)
                let end = min(bytes.count, start + 1 + below(16))
                bytes.insert(contentsOf: Array(bytes[start..<end]), at: end)
            case 6:
                bytes.removeSubrange(position..<bytes.count)
            case 7:
                replaceDigitRun(in: &bytes)
            default:
                bytes.insert(contentsOf: Array(string().utf8.prefix(512)), at: position)
            }
        }
        return bytes
    }

    /// Replaces a random run of ASCII digits (if any) by `digits()`, e.g. `bytes 0-9/10` to
    /// `bytes 0-9223372036854775807/10`.
    private mutating func replaceDigitRun(in bytes: inout [UInt8]) {
        var runs: [Range<Int>] = []
        var index = 0
        while index < bytes.count {
            guard bytes[index] >= 0x30, bytes[index] <= 0x39 else {
                index += 1
                continue
            }
            let start = index
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 { index += 1 }
            runs.append(start..<index)
        }
        guard !runs.isEmpty else { return }
        bytes.replaceSubrange(pick(runs), with: Array(digits().utf8))
    }

    // MARK: - Header values

    /// A mutated seed (usually), a structured value from `generate`, or junk.
    mutating func headerValue(seeds: [String], generate: (inout HostileValues) -> String) -> String {
        switch below(10) {
        case 0, 1, 2, 3: return seeds.isEmpty ? generate(&self) : mutate(pick(seeds))
        case 4: return seeds.isEmpty ? string() : pick(seeds)
        case 5: return string()
        default: return generate(&self)
        }
    }

    /// Optional whitespace around a header value.
    private mutating func padded(_ text: String) -> String {
        guard chance(0.2) else { return text }
        return pick(["", " ", "\t", "  ", "\u{A0}"]) + text + pick(["", " ", "\t", "\r\n", "\u{0}"])
    }

    /// A number for a header: usually digits near the edges of `Int64`, sometimes signed or odd text.
    private mutating func headerNumber() -> String {
        chance(0.85) ? digits() : numberText()
    }

    /// A Content-Range value: `bytes first-last/complete`, `bytes first-last/*` or `bytes */complete`, with
    /// numbers at the edges of `Int64` (`bytes 0-9223372036854775807/*` among them), odd units and separators.
    mutating func contentRange() -> String {
        let unit =
            chance(0.8) ? "bytes" : pick(["BYTES", "Bytes", "byte", "", "items", "bytes=", "bytes\u{0}", "bytés"])
        let separator = chance(0.8) ? " " : pick(["", "  ", "\t", " \t ", "=", "\u{A0}", "\n"])
        var range: String
        switch below(6) {
        case 0:
            range = "*/" + headerNumber()
        case 1:
            // Arithmetic edges: last at or next to Int64.max, complete = last + 1 (wrapping), lengths near 2^63.
            let last = Int64.max &- Int64(below(3))
            let first = pick([0, last, last &- 1, Int64(below(10))])
            let complete = pick(["*", String(last &+ 1), String(last), String(UInt64(last) + 1), headerNumber()])
            range = "\(first)-\(last)/\(complete)"
        case 2:
            let first = nonNegativeInt64()
            let last = chance(0.5) ? first &+ nonNegativeInt64() : nonNegativeInt64()
            let complete = chance(0.3) ? "*" : String(chance(0.5) ? last &+ Int64(below(3)) : nonNegativeInt64())
            range = "\(first)-\(last)/\(complete)"
        default:
            range = headerNumber() + "-" + headerNumber() + "/" + (chance(0.3) ? "*" : headerNumber())
        }
        if chance(0.05) { range += pick([", bytes 1-2/3", ",", " ", "/", "-", "/*", "x"]) }
        return padded(unit + separator + range)
    }

    static let dayNames = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    static let longDayNames = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
    static let monthNames = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// Two characters for a date field: usually digits in or out of range, sometimes junk.
    private mutating func twoDigits(_ plausible: Int) -> String {
        switch below(6) {
        case 0: return pick(["00", "99", "60", "61", "24", "32", "29", "30", "31", " 1", "1 ", "-1", "+1", "١٢", "xx"])
        default:
            let value = below(plausible)
            return value < 10 ? "0\(value)" : String(value)
        }
    }

    /// An HTTP-date in one of the three formats, with fields in and out of range and occasional junk.
    mutating func httpDate() -> String {
        let day = twoDigits(32)
        let month = chance(0.9) ? pick(Self.monthNames) : pick(["jan", "JAN", "Foo", "Ja", "Janu", "\u{0}\u{0}\u{0}"])
        let time = "\(twoDigits(25)):\(twoDigits(61)):\(twoDigits(62))"
        let year =
            chance(0.8) ? String(1 + below(9999)) : pick(["0000", "9999", "10000", "-001", "99999999999999999999"])
        let paddedYear = String(repeating: "0", count: max(0, 4 - year.count)) + year
        let zone = chance(0.9) ? "GMT" : pick(["UTC", "gmt", "", "GMT+1", "Z", "EST"])
        var text: String
        switch below(3) {
        case 0:
            text = "\(pick(Self.dayNames)), \(day) \(month) \(paddedYear) \(time) \(zone)"
        case 1:
            text = "\(pick(Self.longDayNames)), \(day)-\(month)-\(twoDigits(100)) \(time) \(zone)"
        default:
            let asctimeDay = chance(0.5) ? " \(below(10))" : day
            text = "\(pick(Self.dayNames)) \(month) \(asctimeDay) \(time) \(paddedYear)"
        }
        return padded(chance(0.1) ? mutate(text) : text)
    }

    /// An entity tag: strong or weak (or a wrong weak prefix), with hostile opaque text.
    mutating func entityTag() -> String {
        let prefix = chance(0.7) ? pick(["", "W/"]) : pick(["w/", "W", "/", "W/W/", " W/", "W/ "])
        let opaque = chance(0.5) ? pick(["", "abc", "5f3a-1c8e", "x y", "\"", "\u{7F}", "é", "\u{0}"]) : string()
        let quote = chance(0.9) ? "\"" : pick(["", "'", "“"])
        var tag = prefix + quote + opaque + (chance(0.95) ? quote : "")
        if chance(0.05) { tag += pick([", \"b\"", ",", " ", "\"\""]) }
        return padded(tag)
    }

    /// A Content-Disposition value with hostile filename, filename* and other parameters.
    mutating func contentDisposition() -> String {
        var text = chance(0.8) ? pick(["attachment", "inline", "ATTACHMENT", "form-data"]) : string()
        for _ in 0..<below(5) {
            text += pick([";", "; ", " ; ", ";;", ";\t", "; ;"])
            let name =
                chance(0.85) ? pick(["filename", "filename*", "FILENAME", "FileName*", "name", "size"]) : string()
            let equals = chance(0.9) ? "=" : pick(["", " = ", "==", " "])
            let value: String
            switch below(6) {
            case 0: value = "\"" + fileName().replacingOccurrences(of: "\"", with: "\\\"") + "\""
            case 1: value = "\"" + string() + (chance(0.8) ? "\"" : "")
            case 2:
                let charset = pick(["UTF-8", "utf-8", "ISO-8859-1", "iso-8859-1", "US-ASCII", "", "UTF-16"])
                let language = pick(["", "en", "en-US", "'", "é"])
                var encoded = ""
                for byte in fileName().utf8.prefix(300) {
                    if HTTPByteClass.isAttributeCharacter(byte) && !chance(0.2) {
                        encoded.unicodeScalars.append(Unicode.Scalar(byte))
                    } else {
                        encoded += HTTPByteClass.percentEncoded[Int(byte)]
                    }
                }
                value = charset + "'" + language + "'" + (chance(0.9) ? encoded : mutate(encoded))
            case 3: value = fileName()
            default: value = string()
            }
            text += name + equals + value
        }
        return padded(text)
    }

    /// A Retry-After value: delay-seconds at the edges of `Int64`, odd numbers, or an HTTP-date.
    mutating func retryAfter() -> String {
        switch below(3) {
        case 0: return padded(digits())
        case 1: return padded(numberText())
        default: return httpDate()
        }
    }

    /// A header name: a token, one with delimiters or controls, or a credential name.
    mutating func headerName() -> String {
        switch below(4) {
        case 0: return pick(["Accept", "X-Client", "Range", "If-Range", "Authorization", "Cookie", "x-api-key"])
        case 1: return pick(["", " ", "Bad Name", "Name:", "a\r\nb", "é", "X-\u{0}", "(x)", "a/b", "{}"])
        default: return string()
        }
    }

    /// A file name: plain, with an extension, with traversal, controls, bidi overrides, or very long.
    mutating func fileName() -> String {
        switch below(5) {
        case 0: return pick(["report.pdf", "archive.tar.gz", ".profile", "a", "x.txt", "data.bin", "名前.txt"])
        case 1: return pick(["..", "../../etc/passwd", "/", "\\..\\x", ".", "...", " ", "a/b", "\u{202E}fdp.exe"])
        case 2:
            return String(repeating: pick(["a", "é", "日", "👨‍👩‍👧‍👦", "e\u{301}", "."]), count: 60 + below(200))
                + pick(["", ".txt", ".tar.gz", ".verylongextensionindeed"])
        default: return string()
        }
    }

    /// A URL string: http(s) or not, hosts and ports at the edges, hostile paths, queries and fragments.
    mutating func url() -> String {
        let scheme =
            chance(0.7) ? pick(["http", "https"]) : pick(["HTTP", "ftp", "file", "javascript", "", "h ttp", "data"])
        let host =
            chance(0.6)
            ? pick(["127.0.0.1", "localhost", "example.com"])
            : pick(["", "[::1]", "[::1", "ex ample", "例え.テスト", "%00", "a..b", "-", "0", "999.999.999.999", string()])
        let port =
            chance(0.7)
            ? pick(["", ":8080"])
            : ":" + pick(["0", "65535", "65536", "99999999999999999999", "-1", "abc", "", digits()])
        let userinfo = chance(0.05) ? pick(["user:pass@", "@", "a@b@"]) : ""
        let path = chance(0.3) ? "/" + fileName() : "/" + pick(["", "a/b", "%2F", "..", "a%", "x?y#z", string()])
        let separator = chance(0.9) ? "://" : pick([":", ":/", ":///", "//", ""])
        return scheme + separator + userinfo + host + port + path + (chance(0.1) ? "?" + string() : "")
            + (chance(0.05) ? "#" + string() : "")
    }

    /// An ISO 8601 string: valid, with extreme years or offsets, impossible dates, long fractions, or junk.
    mutating func isoDate() -> String {
        switch below(5) {
        case 0:
            return pick([
                "2026-11-30T03:40:00Z", "2026-11-30T03:40:00.250Z", "1970-01-01T00:00:00Z", "0001-01-01T00:00:00Z",
                "9999-12-31T23:59:59.999Z",
            ])
        case 1:
            let year = pick(["0000", "-0001", "10000", "99999", "292277026596", "-292277022657", digits()])
            return "\(year)-01-01T00:00:00Z"
        case 2:
            return pick([
                "2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z", "2026-12-31T24:00:00Z", "2026-12-31T23:59:60Z",
                "2026-11-30T03:40:00+99:99", "2026-11-30T03:40:00-23:59", "2026-11-30T03:40:00",
                "2026-11-30", "2026-11-30T03:40:00.Z", "2026-11-30T03:40:00.\(digits())Z",
            ])
        case 3: return mutate("2026-11-30T03:40:00.250Z")
        default: return string()
        }
    }

    // MARK: - JSON

    /// An extreme JSON number, as raw text: beyond `Int64`, negative zero, fractions, exponents, huge exponents.
    mutating func jsonNumber() -> HostileJSON {
        switch below(4) {
        case 0:
            return .number(
                pick([
                    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
                    "18446744073709551616", "1e400", "-1e400", "1e-400", "-0", "0.0", "1.5", "1e3", "1E18", "-1",
                    "123456789012345678901234567890", "0.1e1", "1e+2", "4194304.0",
                ]))
        case 1: return .number(String(int64()))
        case 2: return .number(digits())
        default:
            let value = double()
            return value.isFinite ? .number(String(value)) : .number(String(int64()))
        }
    }

    /// A random JSON value: null, booleans, extreme numbers, hostile strings, and nested arrays and objects.
    mutating func json(depth: Int = 3) -> HostileJSON {
        switch below(depth > 0 ? 7 : 4) {
        case 0: return .null
        case 1: return .bool(chance(0.5))
        case 2: return jsonNumber()
        case 3: return .string(string())
        case 4: return .array((0..<below(4)).map { _ in json(depth: depth - 1) })
        default:
            return .object(
                (0..<below(4)).map { _ in
                    HostileJSON.Member(key: chance(0.5) ? string() : "k", value: json(depth: depth - 1))
                })
        }
    }

    /// A value for the member `key`, hostile for what the field means: wrong types, extreme numbers, long strings,
    /// nested junk, or a mutation of `current`.
    mutating func jsonField(_ key: String, current: HostileJSON?) -> HostileJSON {
        switch below(10) {
        case 0: return json()
        case 1: return .null
        case 2: return jsonNumber()
        case 3:
            if case .string(let text)? = current { return .string(mutate(text)) }
            return .string(string())
        default:
            switch key {
            case "url", "originalURL": return .string(url())
            case "createdAt", "updatedAt": return .string(isoDate())
            case "offset", "expectedLength", "version": return chance(0.7) ? jsonNumber() : .string(numberText())
            case "etag": return .string(entityTag())
            case "lastModified", "responseDate": return .string(httpDate())
            case "suggestedFilename": return .string(fileName())
            case "tempPath":
                let directory = pick(["/tmp/", "/", "", "relative/", "/a/../", "/tmp/\u{0}/", "//"])
                let uuid = chance(0.7) ? UUID(uuidString: "3F2504E0-4F89-41D3-9A0C-0305E82C3301")!.uuidString : string()
                let name = ".resumable-" + (chance(0.7) ? uuid.lowercased() : uuid) + ".partial"
                return .string(directory + (chance(0.8) ? name : mutate(name)))
            case "destination": return .string(pick(["/", "/tmp/", "/tmp/out.bin", "rel", "/a/../b"]) + string())
            case "headers":
                return .object(
                    (0..<below(4)).map { _ in
                        HostileJSON.Member(key: headerName(), value: chance(0.8) ? .string(string()) : json(depth: 1))
                    })
            default: return json()
            }
        }
    }

    /// `object` (a JSON object) with one to four field mutations: a field set to a hostile value, removed, given
    /// twice, or an unknown or reserved field (`ranges`) added. `keys` are the field names to aim at.
    mutating func mutateJSONObject(_ object: HostileJSON, keys: [String]) -> HostileJSON {
        guard case .object(var members) = object else { return json() }
        for _ in 0..<(1 + below(4)) {
            switch below(10) {
            case 0 where !members.isEmpty:
                members.remove(at: below(members.count))
            case 1:
                members.append(HostileJSON.Member(key: chance(0.5) ? "ranges" : string(), value: json()))
            case 2 where !members.isEmpty:
                let duplicate = pick(members)
                members.append(HostileJSON.Member(key: duplicate.key, value: jsonField(duplicate.key, current: nil)))
            default:
                let key = keys.isEmpty || chance(0.1) ? string() : pick(keys)
                let value = jsonField(key, current: members.first { $0.key == key }?.value)
                if let index = members.firstIndex(where: { $0.key == key }) {
                    members[index].value = value
                } else {
                    members.append(HostileJSON.Member(key: key, value: value))
                }
            }
        }
        return .object(members)
    }

    /// JSON bytes from `object`: mutated field by field (usually), then sometimes byte by byte, sometimes nested
    /// hundreds of levels deep, sometimes not JSON at all.
    mutating func jsonData(from object: HostileJSON, keys: [String]) -> Data {
        switch below(20) {
        case 0: return Data(bytes(maximumCount: 64))
        case 1:
            let depth = 1 + below(2000)
            return Data((String(repeating: "[", count: depth) + String(repeating: "]", count: depth)).utf8)
        case 2: return Data(json().serializedBytes)
        case 3: return Data(object.serializedBytes)
        default:
            let bytes = mutateJSONObject(object, keys: keys).serializedBytes
            return Data(chance(0.15) ? mutateBytes(bytes) : bytes)
        }
    }
}

/// Byte classes the structured generators need (kept here so the generator depends on no target).
enum HTTPByteClass {
    /// RFC 8187 `attr-char`, by byte value.
    private static let attributeCharacters: [Bool] = (0..<256).map { value in
        (0x30...0x39).contains(value) || (0x41...0x5A).contains(value) || (0x61...0x7A).contains(value)
            || "!#$&+-.^_`|~".utf8.contains(UInt8(value))
    }

    /// `%XX` for each byte value.
    static let percentEncoded: [String] = (0..<256).map { value in
        let digits = Array("0123456789ABCDEF")
        return "%" + String(digits[value >> 4]) + String(digits[value & 0xF])
    }

    /// Whether `byte` is an RFC 8187 `attr-char`.
    static func isAttributeCharacter(_ byte: UInt8) -> Bool {
        attributeCharacters[Int(byte)]
    }
}
