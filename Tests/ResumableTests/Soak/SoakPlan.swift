import Foundation
import LoopbackServer

@testable import Resumable

/// The faults of the soak, as the reliability issue lists them.
enum SoakFault: String, CaseIterable, Sendable {
    /// The connection closes (or resets) after a random number of body bytes.
    case connectionDrop = "connection-drop"
    /// The content and its validators change while the download is under way (weak validators may also stay).
    case contentChanged = "content-changed"
    /// A 206 that starts elsewhere than the requested offset (with an honest `Content-Range`).
    case wrongPartialStart = "wrong-206-start"
    /// A 206 that covers less than was asked.
    case shortPartial = "short-206"
    /// A 200 with the whole body in answer to a range request.
    case rangeIgnored = "200-ignoring-range"
    /// A 500, 502, 503 or 504, sometimes several in a row, sometimes with `Retry-After`.
    case serverError = "5xx"
    /// A body paced at a few megabytes per second.
    case throttled = "throttling"
}

/// Which validators the server sends for every version of one download's content.
enum SoakValidatorStyle: String, CaseIterable, Sendable {
    /// A strong `ETag` and a `Last-Modified`.
    case strongETag = "strong-etag"
    /// A weak `ETag` (never usable in `If-Range`) and a `Last-Modified` as recent as the `Date`, as Apache sends for
    /// a file that changed within the last second.
    case weakETag = "weak-etag"
    /// A strong `Last-Modified` only (the `Date` is later by years).
    case lastModifiedOnly = "last-modified-only"
    /// A weak `Last-Modified` only: as recent as the `Date`, so the file may have changed within that second.
    case weakLastModified = "weak-last-modified"
    /// No validators at all: nothing can prove a join safe.
    case none = "no-validators"

    /// Whether the validators are weak, so the content may change while they stay the same.
    var isWeak: Bool {
        self == .weakETag || self == .weakLastModified
    }
}

/// One version of a download's content with the validators the server sends for it.
struct SoakVersion: Sendable {
    /// `v0` for the first registered version, `v1`, `v2`, … for later ones.
    let label: String
    let bytes: [UInt8]
    let etag: String?
    let lastModified: String?
    /// The `Date` header, when it must be fixed (a weak Last-Modified is as recent as the Date).
    let date: String?
    /// How the version was made, for failure messages.
    let origin: String

    /// A version whose validators derive from `identity`, a random number unique to the version (cheaper than
    /// hashing the content, which the server's automatic ETag does, and just as distinct).
    init(label: String, bytes: [UInt8], style: SoakValidatorStyle, identity: UInt64, origin: String) {
        self.label = label
        self.bytes = bytes
        self.origin = origin
        let tag = "\"\(String(identity, radix: 16))-\(String(bytes.count, radix: 16))\""
        // Some second in 2020–2023, different for every version.
        let modified = HTTPDate.format(Date(timeIntervalSince1970: 1_577_836_800 + Double(identity % 100_000_000)))
        etag = style == .strongETag ? tag : style == .weakETag ? "W/" + tag : nil
        lastModified = style == .none ? nil : modified
        date = style.isWeak ? modified : nil
    }

    /// Other content under the validators of `version`, as a server with weak validators may send it: Apache marks
    /// an ETag weak, and a Last-Modified is weak, exactly when the file changed within the last second.
    init(label: String, bytes: [UInt8], validatorsOf version: SoakVersion, origin: String) {
        self.label = label
        self.bytes = bytes
        self.origin = origin + ", same weak validators as \(version.label)"
        etag = version.etag
        lastModified = version.lastModified
        date = version.date
    }

    /// The version as a resource served with `behavior`.
    func resource(behavior: Behavior) -> Resource {
        .bytes(bytes, etag: etag, lastModified: lastModified, date: date, behavior: behavior)
    }

    /// A raw 200 of this whole version that the server cuts after `cut` body bytes.
    func scriptedWhole(cut: Int, reset: Bool) -> ScriptedResponse {
        var headers = [
            HeaderField("Date", date ?? HTTPDate.format(Date())),
            HeaderField("Content-Type", "application/octet-stream"),
            HeaderField("Content-Length", String(bytes.count)),
            HeaderField("Accept-Ranges", "bytes"),
        ]
        if let etag { headers.append(HeaderField("ETag", etag)) }
        if let lastModified { headers.append(HeaderField("Last-Modified", lastModified)) }
        return ScriptedResponse(
            status: 200, headers: headers, body: bytes, closeAfterBodyBytes: cut, resetOnClose: reset)
    }
}

/// What happens to the temporary file between a token's write and the resume, as when a process is killed.
enum SoakTamper: Sendable, CustomStringConvertible {
    /// Nothing: the file is as the task left it.
    case none
    /// The file loses its tail (writes that never reached the disk): it is cut to this fraction of the offset.
    case truncate(Double)
    /// Bytes the token does not cover are appended (writes after the token was taken).
    case append(Int)
    /// The file is gone.
    case delete

    var description: String {
        switch self {
        case .none: return "none"
        case .truncate(let fraction): return "truncate to \(Int(fraction * 100))% of the offset"
        case .append(let count): return "append \(count) bytes"
        case .delete: return "delete"
        }
    }
}

/// A planned pause: the download is paused into a token on disk while the server trickles one response.
struct SoakPause: Sendable {
    /// How long to wait once the trickling response was asked for, before pausing.
    let jitter: Duration
    /// The version registered at the path while the download is paused, if the content changes then.
    let changeTo: SoakVersion?
    /// The resource behavior that comes with ``changeTo``.
    let changedBehavior: Behavior
}

/// One request's worth of misbehavior, queued at the download's path.
struct SoakStep: Sendable {
    enum Action: Sendable {
        case behavior(Behavior)
        case scripted(ScriptedResponse)
    }

    /// The fault this step belongs to; `nil` for a plain pause.
    let fault: SoakFault?
    /// Whether this is the first step of its fault (a fault may take several requests).
    let startsFault: Bool
    let action: Action
    /// A pause taken while this step's response trickles in.
    let pause: SoakPause?
    /// What the step does, for failure messages.
    let note: String
}

/// Everything one download of the soak does, drawn from the run's seed and the download's index.
struct SoakPlan: Sendable {
    let seed: UInt64
    let index: Int
    let path: String
    let style: SoakValidatorStyle
    /// Whether the server answers with chunked transfer coding (no `Content-Length`).
    let chunked: Bool
    let initial: SoakVersion
    /// Every version the server may send, registered or scripted.
    let versions: [SoakVersion]
    let faults: [SoakFault]
    /// The one-shot behaviors and scripted responses, queued in this order before the download starts.
    let steps: [SoakStep]
    /// A pause at a random moment (not tied to a request), after this long.
    let timedPause: Duration?
    /// What happens to the temporary file at each hand-off through a token, in order (cycled).
    let tampers: [SoakTamper]
    let maximumRetries: Int
    /// How many times a transient failure is resumed from its token before the download gives up.
    let resumeBudget: Int
    /// Whether the budget covers every fault, so that only a finished download is acceptable.
    let mustFinish: Bool
    /// The HTTP implementation: `URLSession` or libcurl (when it loads), half and half.
    let transport: DownloadTask.Transport

    init(seed: UInt64, index: Int) {
        var random = SoakRandom(seed: seed, stream: UInt64(index))
        self.seed = seed
        self.index = index
        path = "/soak/\(index)/file-\(index).bin"
        switch random.int(0...99) {
        case 0..<45: style = .strongETag
        case 45..<60: style = .weakETag
        case 60..<75: style = .lastModifiedOnly
        case 75..<87: style = .weakLastModified
        default: style = .none
        }
        chunked = random.chance(0.15)
        let size = random.int(10_000...300_000)
        let contentSeed = random.next()
        initial = SoakVersion(
            label: "v0",
            bytes: Resource.generatedBytes(seed: contentSeed, range: 0..<Int64(size)),
            style: style,
            identity: contentSeed,
            origin: "\(size) generated bytes"
        )

        // Each fault, and each plain pause (nil), takes one or more queued requests, in random order.
        var order: [SoakFault?] = (0..<random.int(1...4)).map { _ in random.pick(SoakFault.allCases) }
        order += Array(repeating: nil, count: random.pick([0, 0, 1, 1, 2]))
        order.shuffle(using: &random)
        faults = order.compactMap(\.self)

        var builder = StepBuilder(random: random, style: style, chunked: chunked, registered: initial)
        var steps: [SoakStep] = []
        for (position, fault) in order.enumerated() {
            steps += builder.steps(for: fault, isLast: position == order.count - 1)
        }
        random = builder.random
        self.steps = steps
        versions = [initial] + builder.newVersions
        transport = random.chance(0.5) && DownloadTask.Transport.libcurl.isAvailable ? .libcurl : .urlSession
        timedPause = random.chance(0.2) ? .milliseconds(random.int(0...30)) : nil
        tampers = (0..<4).map { _ in
            switch random.int(0...19) {
            case 0: return .truncate(Double(random.int(0...99)) / 100)
            case 1: return .append(random.int(1...65_536))
            case 2: return .delete
            default: return .none
            }
        }
        maximumRetries = random.pick([0, 1, 2, 3, 4, 4])
        // Every failure is caused by a queued step (once the queue is empty the server is correct), so a budget
        // above the number of steps lets every download finish; a few downloads get a small one to end in errors.
        if random.chance(0.15) {
            resumeBudget = random.int(0...1)
            mustFinish = false
        } else {
            resumeBudget = steps.count + 2
            mustFinish = true
        }
    }

    /// The whole plan in one line, for failure messages.
    var summary: String {
        let stepNotes = steps.enumerated().map { "#\($0.offset + 1) \($0.element.note)" }.joined(separator: "; ")
        var text =
            "download \(index) of seed \(seed) over \(transport): \(initial.bytes.count) bytes, \(style.rawValue)"
        if chunked { text += ", chunked" }
        text += ", retries \(maximumRetries), resume budget \(resumeBudget)\(mustFinish ? "" : " (may give up)")"
        text += "; faults [\(faults.map(\.rawValue).joined(separator: ", "))]"
        text += "; queued requests: \(stepNotes.isEmpty ? "none" : stepNotes)"
        if let timedPause { text += "; timed pause after \(timedPause)" }
        text += "; temporary file at hand-offs: \(tampers.map(\.description).joined(separator: ", "))"
        return text
    }

    /// The behavior the resource itself has (the one served when nothing is queued).
    var baseBehavior: Behavior {
        Behavior(chunked: chunked)
    }
}

/// Turns a fault into concrete queued steps, drawing the parameters in queue order.
private struct StepBuilder {
    var random: SoakRandom
    let style: SoakValidatorStyle
    let chunked: Bool
    /// The version registered at the path when this point of the queue is reached.
    var registered: SoakVersion
    var newVersions: [SoakVersion] = []

    init(random: SoakRandom, style: SoakValidatorStyle, chunked: Bool, registered: SoakVersion) {
        self.random = random
        self.style = style
        self.chunked = chunked
        self.registered = registered
    }

    private var length: Int { registered.bytes.count }

    /// The steps for `fault` (`nil`: a plain pause). Unless it is the last, a fault that can serve the whole body
    /// mostly also cuts it, so the download is still running when the next queued step comes.
    mutating func steps(for fault: SoakFault?, isLast: Bool) -> [SoakStep] {
        guard let fault else { return [pauseStep(fault: nil, change: nil)] }
        switch fault {
        case .connectionDrop:
            let after = random.int(0...length - 1)
            let reset = random.chance(0.5)
            let chunkedDrop = chunked || random.chance(0.2)
            let behavior = Behavior(dropAfterBytes: Int64(after), resetOnDrop: reset, chunked: chunkedDrop)
            let note = "drop after \(after) bytes\(reset ? " (reset)" : "")\(chunkedDrop ? " chunked" : "")"
            return [step(fault, .behavior(behavior), note)]
        case .contentChanged:
            let other = derivedVersion()
            if random.chance(0.5) {
                // Another version answers one request (a 200, cut short); the registered one comes back after it.
                let cut = random.int(0...other.bytes.count - 1)
                let reset = random.chance(0.5)
                var steps = [
                    step(
                        fault, .scripted(other.scriptedWhole(cut: cut, reset: reset)),
                        "200 of \(other.label) (\(other.origin)) cut after \(cut) bytes")
                ]
                if random.chance(0.5) {
                    let behavior = Behavior(ignoreIfRange: true, chunked: chunked)
                    steps.append(step(fault, .behavior(behavior), "If-Range ignored", starts: false))
                }
                return steps
            }
            // The registered content is replaced while the download is paused.
            registered = other
            return [pauseStep(fault: fault, change: other)]
        case .wrongPartialStart:
            let shift = Int64(random.int(1...8192)) * (random.chance(0.5) ? -1 : 1)
            let after = cut(isLast: isLast)
            let behavior = Behavior(dropAfterBytes: after, rangeStartShift: shift, chunked: chunked)
            return [step(fault, .behavior(behavior), "206 shifted by \(shift)" + Self.describe(cut: after))]
        case .shortPartial:
            let most = random.int(1...max(1, length / 3))
            let after = cut(isLast: isLast)
            let behavior = Behavior(dropAfterBytes: after, maxPartialLength: Int64(most), chunked: chunked)
            return [step(fault, .behavior(behavior), "206 of at most \(most) bytes" + Self.describe(cut: after))]
        case .rangeIgnored:
            let after = cut(isLast: isLast)
            let behavior = Behavior(ignoreRange: true, dropAfterBytes: after, chunked: chunked)
            return [step(fault, .behavior(behavior), "200 ignoring Range" + Self.describe(cut: after))]
        case .serverError:
            return (0..<random.int(1...3)).map { position in
                let status = random.pick([500, 502, 503, 504])
                let retryAfter = random.chance(0.3) ? random.pick(["0", "1"]) : nil
                let behavior = Behavior(status: status, retryAfter: retryAfter)
                let note = "\(status)" + (retryAfter.map { " Retry-After \($0)" } ?? "")
                return step(fault, .behavior(behavior), note, starts: position == 0)
            }
        case .throttled:
            let rate = random.int(2_000_000...8_000_000)
            let after = cut(isLast: isLast)
            let behavior = Behavior(dropAfterBytes: after, throttleBytesPerSecond: rate, chunked: chunked)
            return [step(fault, .behavior(behavior), "\(rate) B/s" + Self.describe(cut: after))]
        }
    }

    /// Where to cut a body that could otherwise complete the download: mostly somewhere, unless it is the last step.
    private mutating func cut(isLast: Bool) -> Int64? {
        random.chance(isLast ? 0.3 : 0.75) ? Int64(random.int(0...length - 1)) : nil
    }

    private static func describe(cut: Int64?) -> String {
        cut.map { ", drop after \($0) bytes" } ?? ""
    }

    private func step(_ fault: SoakFault, _ action: SoakStep.Action, _ note: String, starts: Bool = true) -> SoakStep {
        SoakStep(fault: fault, startsFault: starts, action: action, pause: nil, note: note)
    }

    /// A response that trickles (a few KB every 50 ms), so the download is surely mid-way when it is paused.
    private mutating func pauseStep(fault: SoakFault?, change: SoakVersion?) -> SoakStep {
        let piece = random.int(256...4096)
        let behavior = Behavior(throttleBytesPerSecond: piece * 20, chunked: chunked)
        let jitter = random.int(0...10)
        let ignoreIfRange = change != nil && random.chance(0.5)
        let pause = SoakPause(
            jitter: .milliseconds(jitter),
            changeTo: change,
            changedBehavior: Behavior(ignoreIfRange: ignoreIfRange, chunked: chunked)
        )
        var note = "trickle \(piece) B per 50 ms, pause after \(jitter) ms"
        if let change {
            note += ", then register \(change.label) (\(change.origin))"
            if ignoreIfRange { note += " ignoring If-Range" }
        }
        return SoakStep(
            fault: fault, startsFault: fault != nil, action: .behavior(behavior), pause: pause, note: note)
    }

    /// A new version related to the registered one in a random way, some of them nasty for a resume.
    private mutating func derivedVersion() -> SoakVersion {
        let label = "v\(newVersions.count + 1)"
        let base = registered.bytes
        let bytes: [UInt8]
        let origin: String
        switch base.count < 2 ? 0 : random.int(0...4) {
        case 0:
            let size = random.int(10_000...300_000)
            bytes = Resource.generatedBytes(seed: random.next(), range: 0..<Int64(size))
            origin = "\(size) other bytes"
        case 1:
            bytes = Resource.generatedBytes(seed: random.next(), range: 0..<Int64(base.count))
            origin = "other bytes of the same length"
        case 2:
            var edited = base
            let edits = random.int(1...8)
            for _ in 0..<edits {
                edited[random.int(0...edited.count - 1)] ^= UInt8(random.int(1...255))
            }
            if SoakBytes.equal(edited, base) { edited[0] ^= 0xFF }
            bytes = edited
            origin = "\(registered.label) with \(edits) bytes changed"
        case 3:
            let size = random.int(1...base.count - 1)
            bytes = Array(base[0..<size])
            origin = "\(registered.label) truncated to \(size) bytes"
        default:
            let extra = random.int(1...50_000)
            bytes = base + Resource.generatedBytes(seed: random.next(), range: 0..<Int64(extra))
            origin = "\(registered.label) grown by \(extra) bytes"
        }
        let version =
            style.isWeak && random.chance(0.5)
            ? SoakVersion(label: label, bytes: bytes, validatorsOf: registered, origin: origin)
            : SoakVersion(label: label, bytes: bytes, style: style, identity: random.next(), origin: origin)
        newVersions.append(version)
        return version
    }
}
