import Foundation
import Testing

@testable import Resumable

/// Seeded fuzzing of every parser and converter of outside data: each returns a value or a typed
/// `ResumableError`, never traps, and what it returns keeps the parser's documented invariants.
///
/// The suite runs `RESUMABLE_FUZZ_CASES` cases in total (default 100,000), split between the targets below, from
/// `RESUMABLE_FUZZ_SEED` (default `FuzzSettings.defaultSeed`). Every failure names the target, the seed and the
/// case; see `HostileValues.swift` for the generator and how to replay a case.
@Suite("Hostile input fuzz")
struct HostileInputFuzzTests {
    // MARK: - Seeds

    private struct FixtureInput: Decodable {
        let input: String
    }

    /// The `input` strings of a header fixture file.
    private static func inputs(_ file: String) -> [String] {
        ((try? Fixtures.decode([FixtureInput].self, from: "headers/\(file)")) ?? []).map(\.input)
    }

    static let contentRangeSeeds = inputs("content-range.json")
    static let contentDispositionSeeds = inputs("content-disposition.json")
    static let entityTagSeeds = inputs("entity-tag.json")
    static let httpDateSeeds = inputs("http-date.json")
    static let retryAfterSeeds = inputs("retry-after.json")
    static let filenameSeeds = inputs("suggested-filename.json")

    /// Every token fixture that is a JSON object, valid or not, in file-name order.
    static let tokenSeeds: [HostileJSON] = {
        var seeds: [HostileJSON] = []
        for directory in ["tokens/valid", "tokens/invalid"] {
            let url = Fixtures.url(directory)
            let names = (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []
            for name in names.sorted() where name.hasSuffix(".json") && name != "cases.json" {
                guard let data = try? Data(contentsOf: url.appendingPathComponent(name)),
                    let json = try? JSONDecoder().decode(HostileJSON.self, from: data),
                    case .object = json
                else { continue }
                seeds.append(json)
            }
        }
        return seeds
    }()

    static let tokenKeys = ResumeToken.CodingKeys.allCases.map(\.rawValue)

    @Test("The seeds load: header fixtures and token fixtures")
    func seedsLoad() {
        #expect(Self.contentRangeSeeds.count > 40)
        #expect(Self.contentDispositionSeeds.count > 40)
        #expect(Self.entityTagSeeds.count > 20)
        #expect(Self.httpDateSeeds.count > 40)
        #expect(Self.retryAfterSeeds.count > 10)
        #expect(Self.filenameSeeds.count > 40)
        #expect(Self.tokenSeeds.count > 20)
        #expect(Self.tokenSeeds.contains { (try? ResumeToken(jsonData: Data($0.serialized.utf8))) != nil })
    }

    @Test("The generator is reproducible: the same seed, target and case give the same values")
    func generatorIsReproducible() {
        func sample(_ seed: UInt64) -> [String] {
            var values = HostileValues(seed: seed, target: "reproducible", case: 7)
            return (0..<50).map { _ in values.contentRange() + values.string() + String(values.int64()) }
        }
        #expect(sample(1) == sample(1))
        #expect(sample(1) != sample(2))
    }

    // MARK: - Headers

    @Test("Content-Range: a value or nil; satisfied means 0 <= first <= last < Int64.max and complete > last")
    func contentRange() async {
        await FuzzCampaign(target: "contentRange", cases: FuzzSettings.cases(share: 0.28)).run { values, fuzzCase in
            let input = values.headerValue(seeds: Self.contentRangeSeeds) { $0.contentRange() }
            guard let parsed = ContentRange(input) else { return }
            switch parsed.value {
            case .satisfied(let first, let last, let completeLength):
                fuzzCase.check(
                    first >= 0 && first <= last && last < Int64.max,
                    "\(input.debugDescription) gave first \(first), last \(last)")
                if let completeLength {
                    fuzzCase.check(
                        completeLength > last, "\(input.debugDescription) gave complete \(completeLength) <= \(last)")
                }
                guard first >= 0, first <= last, last < Int64.max else { return }
                // What the state machine computes; these would trap if the invariant did not hold.
                let end = last + 1
                let length = last - first + 1
                fuzzCase.check(end > last && length >= 1, "\(input.debugDescription): end \(end), length \(length)")
                let canonical = "bytes \(first)-\(last)/\(completeLength.map(String.init) ?? "*")"
                fuzzCase.check(
                    ContentRange(canonical) == parsed,
                    "\(input.debugDescription) does not round-trip through \(canonical.debugDescription)")
            case .unsatisfied(let completeLength):
                fuzzCase.check(completeLength >= 0, "\(input.debugDescription) gave complete \(completeLength)")
            }
        }
    }

    @Test("Content-Disposition: a value or nil; the chosen file name is always safe")
    func contentDisposition() async {
        await FuzzCampaign(target: "contentDisposition", cases: FuzzSettings.cases(share: 0.08)).run {
            values, fuzzCase in
            let input = values.headerValue(seeds: Self.contentDispositionSeeds) { $0.contentDisposition() }
            if let parsed = ContentDisposition(input) {
                fuzzCase.check(
                    !parsed.type.isEmpty && parsed.type.utf8.allSatisfy(HTTPSyntax.isTokenCharacter)
                        && parsed.type == parsed.type.lowercased(),
                    "\(input.debugDescription) gave type \(parsed.type.debugDescription)")
                for name in [parsed.filename, parsed.extendedFilename, parsed.preferredFilename].compactMap({ $0 }) {
                    Self.checkSanitized(name, &fuzzCase)
                }
            }
            let url = URL(string: values.url()) ?? URL(string: "http://example.com/")!
            let chosen = SuggestedFilename.choose(contentDisposition: input, url: url)
            fuzzCase.check(
                SuggestedFilename.sanitize(chosen).map(Self.scalars) == Self.scalars(chosen),
                "choose(\(input.debugDescription), \(url)) gave an unsafe name \(chosen.debugDescription)")
        }
    }

    @Test("SuggestedFilename: sanitize is nil or a safe, idempotent name; available never hangs")
    func suggestedFilename() async {
        await FuzzCampaign(target: "suggestedFilename", cases: FuzzSettings.cases(share: 0.05)).run {
            values, fuzzCase in
            let input = values.headerValue(seeds: Self.filenameSeeds) { $0.fileName() }
            Self.checkSanitized(input, &fuzzCase)
            guard let name = SuggestedFilename.sanitize(input) else { return }
            // Names taken: none, a few, or (rarely) all 9,999 numbered ones.
            let taken = values.below(4_000) == 0 ? Int.max : values.below(4)
            var calls = 0
            let available = SuggestedFilename.available(name) { _ in
                calls += 1
                return calls <= taken
            }
            fuzzCase.check(
                !available.isEmpty && available.utf8.count <= 255 && !available.contains("/"),
                "available(\(name.debugDescription)) gave \(available.debugDescription)")
        }
    }

    @Test("ETag: a value or nil; a parsed tag round-trips and is quoted")
    func entityTag() async {
        await FuzzCampaign(target: "entityTag", cases: FuzzSettings.cases(share: 0.10)).run { values, fuzzCase in
            let input = values.headerValue(seeds: Self.entityTagSeeds) { $0.entityTag() }
            guard let tag = EntityTag(input) else { return }
            fuzzCase.check(
                EntityTag(tag.rawValue) == tag && tag.rawValue.hasSuffix("\"")
                    && tag.isWeak == tag.rawValue.hasPrefix("W/") && !tag.opaqueTag.contains("\""),
                "\(input.debugDescription) gave \(tag)")
            fuzzCase.check(tag.weakMatches(tag) && tag.strongMatches(tag) == !tag.isWeak, "\(tag) matching")
        }
    }

    @Test("HTTP-date: a date or nil, for any `now`; format writes a date that parses back")
    func httpDate() async {
        await FuzzCampaign(target: "httpDate", cases: FuzzSettings.cases(share: 0.14)).run { values, fuzzCase in
            let input = values.headerValue(seeds: Self.httpDateSeeds) { $0.httpDate() }
            let now = values.date()
            if let date = HTTPDate.parse(input, now: now) {
                let seconds = date.timeIntervalSince1970
                fuzzCase.check(seconds.isFinite, "\(input.debugDescription) gave \(seconds)")
                // Years 0001–9999 format exactly, so a parsed date must survive a round trip.
                if seconds >= -62_135_596_800, seconds <= 253_402_300_799 {
                    let formatted = HTTPDate.format(date)
                    fuzzCase.check(
                        HTTPDate.parse(formatted, now: now) == date,
                        "\(input.debugDescription) gave \(seconds), formatted \(formatted.debugDescription)")
                }
            }
            let hostile = values.date()
            let formatted = HTTPDate.format(hostile)
            fuzzCase.check(
                formatted.utf8.count == 29 && HTTPDate.parse(formatted, now: now) != nil,
                "format(\(hostile.timeIntervalSince1970)) gave \(formatted.debugDescription)")
        }
    }

    @Test("Retry-After: a delay of zero or more, or nil, for any `now`")
    func retryAfter() async {
        await FuzzCampaign(target: "retryAfter", cases: FuzzSettings.cases(share: 0.10)).run { values, fuzzCase in
            let input = values.headerValue(seeds: Self.retryAfterSeeds) { $0.retryAfter() }
            let now = values.date()
            guard let delay = RetryAfter.delay(input, now: now) else { return }
            fuzzCase.check(delay >= .zero, "\(input.debugDescription) at \(now.timeIntervalSince1970) gave \(delay)")
            let trimmed = HTTPSyntax.trimmedBytes(input)
            if !trimmed.isEmpty, trimmed.allSatisfy(HTTPSyntax.isDigit),
                let seconds = Int64(String(decoding: trimmed, as: UTF8.self))
            {
                fuzzCase.check(delay == .seconds(seconds), "\(input.debugDescription) gave \(delay)")
            }
            // What a retry does with it: the policy must cap it without trapping.
            let policyDelay = DownloadTask.RetryPolicy.default.delay(attempt: 1, serverAsked: delay)
            fuzzCase.check(policyDelay >= .zero && policyDelay <= .seconds(5), "policy gave \(policyDelay)")
        }
    }

    // MARK: - Syntax helpers, URLs, file names

    @Test("HTTP syntax helpers, header field syntax, URLs and temporary file names accept any input")
    func syntaxHelpers() async {
        await FuzzCampaign(target: "syntax", cases: FuzzSettings.cases(share: 0.05)).run { values, fuzzCase in
            let bytes =
                values.chance(0.5)
                ? values.mutateBytes(Array(values.digits().utf8)) : values.bytes(maximumCount: 48)
            let text = String(decoding: bytes, as: UTF8.self)

            let parsed = HTTPSyntax.parseDigits(bytes)
            let reference =
                !bytes.isEmpty && bytes.allSatisfy(HTTPSyntax.isDigit)
                ? Int64(String(decoding: bytes, as: UTF8.self)) : nil
            fuzzCase.check(parsed == reference, "parseDigits(\(bytes)) gave \(String(describing: parsed))")

            let trimmed = HTTPSyntax.trimmedBytes(text)
            fuzzCase.check(
                !(trimmed.first.map(HTTPSyntax.isWhitespace) ?? false)
                    && !(trimmed.last.map(HTTPSyntax.isWhitespace) ?? false),
                "trimmedBytes(\(text.debugDescription))")
            let lowered = HTTPSyntax.lowercasedString(bytes)
            fuzzCase.check(
                HTTPSyntax.equalsIgnoringCase(bytes, "bytes") == (lowered == "bytes"),
                "equalsIgnoringCase(\(bytes))")

            let name = values.headerName()
            let value = values.string()
            fuzzCase.check(
                HTTPFieldSyntax.isValidName(name)
                    == (!name.isEmpty && name.utf8.allSatisfy(HTTPSyntax.isTokenCharacter)),
                "isValidName(\(name.debugDescription))")
            if HTTPFieldSyntax.isValidValue(value) {
                fuzzCase.check(
                    !value.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0x00 },
                    "isValidValue(\(value.debugDescription)) accepted a line break or NUL")
            }
            _ = SensitiveHeaders.contains(name)

            let urlText = values.url()
            if let url = URL(string: urlText) {
                let supported = HTTPURL.isSupported(url)
                let origin = HTTPURL.origin(of: url)
                if supported {
                    fuzzCase.check(
                        origin.hasPrefix("http://") || origin.hasPrefix("https://"),
                        "\(urlText.debugDescription) is supported with origin \(origin.debugDescription)")
                }
            }

            // Token dates: a date that formats and parses back to the millisecond, or nil.
            let isoText = values.isoDate()
            if let date = ISO8601.parse(isoText) {
                let written = ISO8601.format(date)
                let reread = ISO8601.parse(written)
                fuzzCase.check(
                    reread.map { abs($0.timeIntervalSince(date)) < 0.001 } ?? false,
                    "\(isoText.debugDescription) gave \(date.timeIntervalSince1970), written \(written.debugDescription)"
                )
            }
            let instant = values.date()
            fuzzCase.check(
                ISO8601.parse(ISO8601.format(instant)) != nil,
                "format(\(instant.timeIntervalSince1970)) gave \(ISO8601.format(instant).debugDescription)")

            let fileName = values.chance(0.3) ? TemporaryFileName.make() : values.mutate(TemporaryFileName.make())
            if TemporaryFileName.isValid(fileName) {
                fuzzCase.check(
                    fileName.utf8.count == 55 && fileName.hasPrefix(".resumable-") && !fileName.contains("/"),
                    "isValid accepted \(fileName.debugDescription)")
            }
        }
    }

    // MARK: - Resume tokens

    @Test("ResumeToken(jsonData:): a valid token or a ResumableError, for mutated tokens and junk")
    func resumeToken() async {
        await FuzzCampaign(target: "resumeToken", cases: FuzzSettings.cases(share: 0.10)).run { values, fuzzCase in
            let data = values.jsonData(from: values.pick(Self.tokenSeeds), keys: Self.tokenKeys)
            let token: ResumeToken
            do throws(ResumableError) {
                token = try ResumeToken(jsonData: data)
            } catch {
                fuzzCase.check(
                    (error.code == .invalidToken || error.code == .newerTokenVersion) && !error.message.isEmpty,
                    "\(Self.describe(data)) threw \(error)")
                return
            }
            Self.checkToken(token, from: data, &fuzzCase)
        }
    }

    // MARK: - Durations

    @Test("Durations of any size: retry delays, curl and URLSession timeouts convert without trapping")
    func durations() async {
        await FuzzCampaign(target: "durations", cases: FuzzSettings.cases(share: 0.10)).run { values, fuzzCase in
            let policy = DownloadTask.RetryPolicy(
                maximumRetries: values.int(), initialDelay: values.duration(), maximumDelay: values.duration())
            let attempt = values.chance(0.7) ? values.below(200) : values.int()
            let serverAsked = values.chance(0.3) ? values.duration() : nil
            let delay = policy.delay(attempt: attempt, serverAsked: serverAsked)
            fuzzCase.check(
                delay >= .zero && delay <= max(policy.maximumDelay, .zero) && delay <= .seconds(1_000_000_000),
                "\(policy) attempt \(attempt) server \(String(describing: serverAsked)) gave \(delay)")
            if serverAsked == nil, policy.initialDelay >= .zero, policy.initialDelay <= policy.maximumDelay,
                policy.maximumDelay <= .seconds(1_000_000_000)
            {
                let expected = Self.referenceDelay(policy, attempt: attempt)
                fuzzCase.check(delay == expected, "\(policy) attempt \(attempt) gave \(delay), not \(expected)")
            }

            let timeout = values.duration()
            let milliseconds = timeout.clampedMilliseconds
            if timeout <= .zero {
                fuzzCase.check(milliseconds == 0, "\(timeout) gave \(milliseconds) ms")
            } else if milliseconds < Int64.max {
                // Rounded up: the smallest whole number of milliseconds not shorter than the timeout.
                fuzzCase.check(
                    Duration.milliseconds(milliseconds) >= timeout && Duration.milliseconds(milliseconds - 1) < timeout,
                    "\(timeout) gave \(milliseconds) ms")
            } else {
                fuzzCase.check(timeout > .milliseconds(Int64.max - 1), "\(timeout) gave Int64.max ms")
            }
            let curl = CurlTransport.optionMilliseconds(timeout)
            fuzzCase.check(curl >= 1 && curl <= 1_000_000_000_000, "curl option for \(timeout): \(curl)")
            let interval = URLSessionTransport.timeoutInterval(timeout)
            fuzzCase.check(
                interval.isFinite && interval >= 0.000_999 && interval <= 1e9
                    && !Int(interval).multipliedReportingOverflow(by: 1000).overflow,
                "URLSession interval for \(timeout): \(interval)")
        }
    }

    // MARK: - Regressions for the traps an outside review found

    @Test("Regression: Content-Range with last = Int64.max is malformed (last + 1 would overflow)")
    func contentRangeLastAtInt64Max() {
        #expect(ContentRange("bytes 0-9223372036854775807/*") == nil)
        #expect(ContentRange("bytes 9223372036854775807-9223372036854775807/*") == nil)
        #expect(ContentRange("bytes 0-9223372036854775807/9223372036854775807") == nil)
        #expect(
            ContentRange("bytes 0-9223372036854775806/*")?.value
                == .satisfied(first: 0, last: 9_223_372_036_854_775_806, completeLength: nil))
    }

    @Test("Regression: token dates are parsed without ICU, which crashes on long fractions")
    func tokenDatesWithoutICU() throws {
        // ISO8601DateFormatter (ICU) dies with SIGFPE on this createdAt.
        let crashing = "2026-11-30T03:40:00.860164470946075312283793887493383256980Z"
        let parsed = try #require(ISO8601.parse(crashing))
        #expect(ISO8601.format(parsed) == "2026-11-30T03:40:00.860Z")
        var json = try #require(Self.tokenSeeds.first { (try? ResumeToken(jsonData: Data($0.serialized.utf8))) != nil })
        guard case .object(var members) = json else { return }
        for index in members.indices where members[index].key == "createdAt" {
            members[index].value = .string(crashing)
        }
        json = .object(members)
        #expect((try? ResumeToken(jsonData: Data(json.serialized.utf8))) != nil)
        // What the formatter let through and the format never holds: other years, impossible dates and offsets.
        for invalid in [
            "99999-01-01T00:00:00Z", "0000-12-31T23:59:59Z", "-0001-01-01T00:00:00Z", "292277026596-01-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-11-30T03:40:00+99:99", "2026-11-30T24:00:00Z", "2026-11-30T03:40:00", "2026-11-30T03:40:00.Z",
            " 2026-11-30T03:40:00Z", "2026-11-30T03:40:00Z ", "",
        ] {
            #expect(ISO8601.parse(invalid) == nil, "\(invalid)")
        }
        // What the format does hold, and RFC 3339 allows.
        #expect(ISO8601.parse("2026-11-30T03:44:40.250Z") == Date(timeIntervalSince1970: 1_796_010_280.25))
        #expect(ISO8601.parse("2026-11-30T03:44:40Z") == Date(timeIntervalSince1970: 1_796_010_280))
        #expect(ISO8601.parse("2026-11-30T05:44:40+02:00") == Date(timeIntervalSince1970: 1_796_010_280))
        #expect(ISO8601.parse("2026-11-30t03:44:40z") == Date(timeIntervalSince1970: 1_796_010_280))
        #expect(ISO8601.format(Date(timeIntervalSince1970: 1_796_010_280.25)) == "2026-11-30T03:44:40.250Z")
        #expect(ISO8601.format(Date(timeIntervalSince1970: .nan)) == "0001-01-01T00:00:00.000Z")
        #expect(ISO8601.format(Date(timeIntervalSince1970: 1e300)) == "9999-12-31T23:59:59.999Z")
    }

    @Test("Regression: a retry policy with huge or negative durations gives a delay without trapping")
    func retryPolicyHugeDurations() {
        let huge = DownloadTask.RetryPolicy(
            maximumRetries: .max, initialDelay: .seconds(Int64.max), maximumDelay: .seconds(Int64.max) * 18)
        #expect(huge.delay(attempt: 1, serverAsked: nil) == .seconds(1_000_000_000))
        #expect(huge.delay(attempt: 200, serverAsked: nil) == .seconds(1_000_000_000))
        #expect(huge.delay(attempt: 3, serverAsked: .seconds(Int64.max)) == .seconds(1_000_000_000))
        let tiny = DownloadTask.RetryPolicy(
            maximumRetries: .max, initialDelay: .nanoseconds(1), maximumDelay: .seconds(Int64.max))
        #expect(tiny.delay(attempt: .max, serverAsked: nil) == .seconds(1_000_000_000))
        let negative = DownloadTask.RetryPolicy(
            maximumRetries: 5, initialDelay: .seconds(-1), maximumDelay: .seconds(Int64.min))
        #expect(negative.delay(attempt: 500, serverAsked: nil) == .zero)
        #expect(negative.delay(attempt: 1, serverAsked: .seconds(-5)) == .zero)
        #expect(DownloadTask.RetryPolicy.default.delay(attempt: 1, serverAsked: .seconds(-5)) == .zero)
        // The usual policy is unchanged: 0.25 s doubling, capped at 5 s.
        let usual = (1...7).map { DownloadTask.RetryPolicy.default.delay(attempt: $0, serverAsked: nil) }
        #expect(
            usual == [
                .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(4), .seconds(5), .seconds(5),
            ])
    }

    @Test("Regression: idle timeouts of .seconds(Int64.max) and beyond convert for curl and URLSession")
    func durationClamp() {
        for timeout: Duration in [.seconds(Int64.max), .seconds(Int64.max) * 18, .milliseconds(Int64.max)] {
            #expect(timeout.clampedMilliseconds == .max)
            #expect(CurlTransport.optionMilliseconds(timeout) == 1_000_000_000_000)
            #expect(URLSessionTransport.timeoutInterval(timeout) == 1e9)
        }
        for timeout: Duration in [.zero, .seconds(-1), .seconds(Int64.min) * 18] {
            #expect(timeout.clampedMilliseconds == 0)
            #expect(CurlTransport.optionMilliseconds(timeout) == 1)
            #expect(URLSessionTransport.timeoutInterval(timeout) == 0.001)
        }
        #expect(Duration.milliseconds(1500).clampedMilliseconds == 1500)
        #expect((Duration.milliseconds(1500) + .nanoseconds(1)).clampedMilliseconds == 1501)
        #expect(CurlTransport.optionMilliseconds(.seconds(60)) == 60_000)
        #expect(URLSessionTransport.timeoutInterval(.milliseconds(2500)) == 2.5)
    }

    // MARK: - Checks

    /// The scalars of `text`: names are compared scalar by scalar, not by canonical equivalence.
    static func scalars(_ text: String) -> [Unicode.Scalar] {
        Array(text.unicodeScalars)
    }

    /// `sanitize(name)` is nil or a safe name that sanitizes to itself (the token decoder demands that).
    static func checkSanitized(_ name: String, _ fuzzCase: inout FuzzCase) {
        guard let safe = SuggestedFilename.sanitize(name) else { return }
        let scalars = Self.scalars(safe)
        let forbidden: (Unicode.Scalar) -> Bool = { scalar in
            switch scalar.value {
            case 0x2F, 0x5C, 0x00...0x1F, 0x7F...0x9F, 0x061C, 0x200E, 0x200F, 0x2028...0x202E, 0x2066...0x2069: true
            default: false
            }
        }
        let edge: (Unicode.Scalar) -> Bool = { $0 == "." || $0.properties.isWhitespace }
        fuzzCase.check(
            !scalars.isEmpty && safe.utf8.count <= SuggestedFilename.maximumUTF8Length
                && !scalars.contains(where: forbidden)
                && !edge(scalars[0]) && !edge(scalars[scalars.count - 1]),
            "sanitize(\(name.debugDescription)) gave \(safe.debugDescription)")
        fuzzCase.check(
            SuggestedFilename.sanitize(safe).map(Self.scalars) == scalars,
            "sanitize is not idempotent on \(name.debugDescription): \(safe.debugDescription)")
    }

    /// A decoded token keeps every rule of the decoder, and its own JSON decodes to the same token.
    static func checkToken(_ token: ResumeToken, from data: Data, _ fuzzCase: inout FuzzCase) {
        let input = describe(data)
        fuzzCase.check(
            token.version == (token.completedRanges.isEmpty ? 1 : 2), "\(input): version \(token.version)")
        fuzzCase.check(
            token.offset >= 0 && token.expectedLength.map { $0 >= token.offset } ?? true,
            "\(input): offset \(token.offset), expectedLength \(String(describing: token.expectedLength))")
        fuzzCase.check(
            HTTPURL.isSupported(token.url) && HTTPURL.isSupported(token.originalURL),
            "\(input): URLs \(token.url), \(token.originalURL)")
        let tempName = (token.tempPath as NSString).lastPathComponent
        fuzzCase.check(
            token.tempPath.hasPrefix("/") && !token.tempPath.contains("\0")
                && !token.tempPath.split(separator: "/").contains("..") && TemporaryFileName.isValid(tempName),
            "\(input): tempPath \(token.tempPath.debugDescription)")
        fuzzCase.check(
            SuggestedFilename.sanitize(token.suggestedFilename).map(Self.scalars)
                == Self.scalars(token.suggestedFilename),
            "\(input): suggestedFilename \(token.suggestedFilename.debugDescription)")
        if let destination = token.destination {
            fuzzCase.check(
                destination.hasPrefix("/") && !destination.split(separator: "/").contains("..")
                    && !destination.utf8.contains(0),
                "\(input): destination \(destination.debugDescription)")
        }
        for (name, value) in token.headers {
            fuzzCase.check(
                HTTPFieldSyntax.isValidName(name) && HTTPFieldSyntax.isValidValue(value)
                    && !SensitiveHeaders.contains(name),
                "\(input): header \(name.debugDescription): \(value.debugDescription)")
        }
        if let etag = token.etag {
            fuzzCase.check(EntityTag(etag) != nil, "\(input): etag \(etag.debugDescription)")
        }
        for value in [token.etag, token.lastModified, token.responseDate, token.acceptRanges].compactMap({ $0 }) {
            fuzzCase.check(HTTPFieldSyntax.isValidValue(value), "\(input): header value \(value.debugDescription)")
        }
        fuzzCase.check(
            token.createdAt.timeIntervalSince1970.isFinite && token.updatedAt.timeIntervalSince1970.isFinite,
            "\(input): dates \(token.createdAt), \(token.updatedAt)")

        // What the library writes it must read back.
        let written = token.jsonData()
        do {
            let reread = try ResumeToken(jsonData: written)
            fuzzCase.check(
                reread.url == token.url && reread.originalURL == token.originalURL && reread.offset == token.offset
                    && reread.expectedLength == token.expectedLength && reread.etag == token.etag
                    && reread.lastModified == token.lastModified && reread.responseDate == token.responseDate
                    && reread.acceptRanges == token.acceptRanges && reread.tempPath == token.tempPath
                    && reread.suggestedFilename == token.suggestedFilename && reread.destination == token.destination
                    && reread.headers == token.headers,
                "\(input): re-encoded as \(describe(written)), read back differently")
        } catch {
            fuzzCase.fail("\(input): re-encoded as \(describe(written)), which does not decode: \(error)")
        }
    }

    /// The retry delay as the policy defined it before it was made total: doubling from the initial delay, capped.
    static func referenceDelay(_ policy: DownloadTask.RetryPolicy, attempt: Int) -> Duration {
        var delay = policy.initialDelay
        guard delay > .zero else { return .zero }
        for _ in 1..<max(attempt, 1) {
            delay *= 2
            if delay >= policy.maximumDelay { return policy.maximumDelay }
        }
        return min(delay, policy.maximumDelay)
    }

    /// Data as text for a failure message, shortened.
    static func describe(_ data: Data) -> String {
        let text = String(decoding: data.prefix(600), as: UTF8.self)
        return text.debugDescription + (data.count > 600 ? " (\(data.count) bytes)" : "")
    }
}
