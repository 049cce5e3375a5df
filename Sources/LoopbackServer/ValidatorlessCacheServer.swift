import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A cache in front of an origin whose file was replaced, which drops the validators from its `206`s and does not
/// evaluate `If-Range`: a plain GET gets a `200` of version 1 with a strong `ETag` and a `Last-Modified`; every range
/// request gets a `206` of version 2 (the same length) without either, whatever its `If-Range` says. A client that
/// joins such a `206` to bytes of the `200` splices two versions.
///
/// The order is fixed by events, so that the first answer's connection ends before any segment is judged and no answer
/// is left to read on: the first `200` sends its head and first MiB and, once a range request has arrived, closes the
/// connection there (a cut); range requests are answered once that first `200` has ended. With `holdingSecondWhole`, the second `200` sends its first MiB and holds the rest until
/// ``release()``; every later `200` sends all of version 1 at once. The holds wait on the connection's own thread;
/// their deadline of 300 s only bounds a client that never does what a test waits for.
public final class ValidatorlessCacheServer: Sendable {
    /// The bytes the `200`s carry.
    public let versionOne: [UInt8]
    /// The bytes the `206`s carry.
    public let versionTwo: [UInt8]
    /// The file's address.
    public var url: URL { URL(string: "http://127.0.0.1:\(raw.port)/file.bin")! }

    /// `nil` when `bytes` are exactly one of the two versions; else where they leave version 1, for a message.
    public func splice(in bytes: [UInt8]) -> String? {
        if bytes == versionOne || bytes == versionTwo { return nil }
        let first = zip(bytes, versionOne).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        return "\(bytes.count) bytes, differing from version 1 at \(first.map(String.init) ?? "its end")"
    }

    private final class State: Sendable {
        let wholes = Atomic<Int>(0)
        let partials = Atomic<Int>(0)
        let firstWholeEnded = Atomic<Bool>(false)
        let released = Atomic<Bool>(false)

        /// Polls (on the connection's own thread) until `condition` holds, for at most 300 s.
        func wait(until condition: () -> Bool) {
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(300)
            while !condition(), clock.now < deadline { usleep(1000) }
        }
    }
    private let raw: RawScriptServer
    private let state = State()

    /// - Parameters:
    ///   - length: The length of both versions (more than 1 MiB).
    ///   - seeds: The seeds of version 1 and version 2 (``Resource/generatedBytes(seed:range:)``).
    ///   - etag: The strong `ETag` of the `200`s, quotes included.
    ///   - holdingSecondWhole: Whether the second `200` holds after its first MiB until ``release()``.
    public init(
        length: Int64 = 8 << 20, seeds: (one: UInt64, two: UInt64), etag: String, holdingSecondWhole: Bool = false
    ) throws {
        precondition(length > 1 << 20, "the 200s send a first MiB, then hold")
        let one = Resource.generatedBytes(seed: seeds.one, range: 0..<length)
        let two = Resource.generatedBytes(seed: seeds.two, range: 0..<length)
        versionOne = one
        versionTwo = two
        let state = self.state
        raw = try RawScriptServer { head, _, send in
            guard head.starts(with: Array("GET ".utf8)) else { return .completed(0) }
            if let range = Self.requestedRange(in: head, length: length) {
                state.partials.add(1, ordering: .sequentiallyConsistent)
                state.wait { state.firstWholeEnded.load(ordering: .sequentiallyConsistent) }
                let body = Array(two[Int(range.lowerBound)..<Int(range.upperBound)])
                return send(Self.partialHead(range, length: length) + body) ? .completed(206) : .clientLeft(0)
            }
            let number = state.wholes.add(1, ordering: .sequentiallyConsistent).newValue
            let head = Self.wholeHead(length: length, etag: etag)
            guard number == 1 || (number == 2 && holdingSecondWhole) else {
                return send(head + one) ? .completed(200) : .clientLeft(0)
            }
            if number == 1 {
                defer { state.firstWholeEnded.store(true, ordering: .sequentiallyConsistent) }
                guard send(head + Array(one[0..<(1 << 20)])) else { return .clientLeft(0) }
                state.wait { state.partials.load(ordering: .sequentiallyConsistent) > 0 }
                // Cut there: the rest of version 1 can only come from a range request or a new GET.
                return .completed(200)
            }
            guard send(head + Array(one[0..<(1 << 20)])) else { return .clientLeft(0) }
            state.wait { state.released.load(ordering: .sequentiallyConsistent) }
            return send(Array(one[(1 << 20)...])) ? .completed(200) : .clientLeft(0)
        }
    }

    /// Lets a held second `200` send the rest.
    public func release() { state.released.store(true, ordering: .sequentiallyConsistent) }

    /// Releases what is held and stops accepting connections.
    public func stop() {
        release()
        raw.stop()
    }

    deinit { stop() }

    private static func partialHead(_ range: Range<Int64>, length: Int64) -> [UInt8] {
        RawScriptServer.head(
            "206 Partial Content",
            [
                "Accept-Ranges: bytes", "Date: Tue, 02 Jan 2024 00:00:00 GMT",
                "Content-Range: bytes \(range.lowerBound)-\(range.upperBound - 1)/\(length)",
                "Content-Length: \(range.count)",
            ])
    }

    private static func wholeHead(length: Int64, etag: String) -> [UInt8] {
        RawScriptServer.head(
            "200 OK",
            [
                "Accept-Ranges: bytes", "Last-Modified: Mon, 01 Jan 2024 00:00:00 GMT",
                "Date: Tue, 02 Jan 2024 00:00:00 GMT", "Content-Length: \(length)",
            ], etag: Array(etag.utf8))
    }

    /// The range of a `Range: bytes=first-[last]` header that starts inside the file, clamped to it.
    private static func requestedRange(in head: [UInt8], length: Int64) -> Range<Int64>? {
        guard let value = RawScriptServer.header("Range", in: head).map({ String(decoding: $0, as: UTF8.self) }),
            value.hasPrefix("bytes=")
        else { return nil }
        let parts = value.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, let first = Int64(parts[0]), first >= 0, first < length else { return nil }
        let last = min(Int64(parts[1]) ?? (length - 1), length - 1)
        guard last >= first else { return nil }
        return first..<(last + 1)
    }
}
