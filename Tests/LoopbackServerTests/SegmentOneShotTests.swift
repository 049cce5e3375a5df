import Foundation
import LoopbackServer
import Testing

/// One-shot behaviors and scripted responses keyed by the first byte of a request's range: a way to pick out one
/// segment among requests arriving in parallel, in any order.
@Suite("One-shots keyed by range start")
struct SegmentOneShotTests {
    static let length: Int64 = 400_000
    let content = Resource.generatedBytes(seed: 11, range: 0..<SegmentOneShotTests.length)
    /// Four segments of 100 000 bytes.
    let segments: [ClosedRange<Int64>] = [0...99_999, 100_000...199_999, 200_000...299_999, 300_000...399_999]
    let etag = "\"seg\""

    func makeServer(behavior: Behavior = .normal) throws -> LoopbackServer {
        let server = try LoopbackServer()
        server.register(.bytes(content, etag: etag, behavior: behavior), at: "/f")
        return server
    }

    func segmentHeaders(_ range: ClosedRange<Int64>) -> [(String, String)] {
        [("Range", "bytes=\(range.lowerBound)-\(range.upperBound)"), ("If-Range", etag)]
    }

    func bytes(_ range: ClosedRange<Int64>) -> [UInt8] {
        Array(content[Int(range.lowerBound)...Int(range.upperBound)])
    }

    /// Starts the four segment requests in parallel.
    func startSegments(on server: LoopbackServer) -> [Task<ParallelClients.Timed, any Error>] {
        segments.map { ParallelClients.start(port: server.port, path: "/f", headers: segmentHeaders($0)) }
    }

    /// Expects the exact 206 for `range`.
    func expectPartial(_ response: RawResponse, _ range: ClosedRange<Int64>) {
        #expect(response.status == 206)
        #expect(response.header("Content-Range") == "bytes \(range.lowerBound)-\(range.upperBound)/\(Self.length)")
        #expect(response.header("ETag") == etag)
        expectSameBytes(response.body, bytes(range))
    }

    @Test("Only the request whose single range starts at the byte takes it; the FIFO queue is left alone")
    func matchingRules() throws {
        let server = try makeServer()
        defer { server.shutdown() }
        server.enqueue(behavior: Behavior(status: 502), for: "/f", whenRangeStartsAt: 200_000)
        server.enqueue(behavior: Behavior(maxPartialLength: 10), for: "/f")
        #expect(server.queuedCount(for: "/f") == 2)

        // Another segment takes the FIFO one-shot, not the keyed one.
        let other = try RawHTTPClient.request(port: server.port, path: "/f", headers: segmentHeaders(segments[0]))
        #expect(other.status == 206)
        expectSameBytes(other.body, Array(content[0..<10]))
        #expect(server.queuedCount(for: "/f", whenRangeStartsAt: 200_000) == 1)

        // Near misses: a suffix range, several ranges, another first byte, no range, a different path.
        for range in ["bytes=-200000", "bytes=200000-200009,300000-300009", "bytes=200001-299999", nil] {
            let headers = range.map { [("Range", $0)] } ?? []
            let response = try RawHTTPClient.request(port: server.port, path: "/f", headers: headers)
            #expect(response.status != 502, "\(range ?? "no range")")
        }
        server.register(.bytes(content, etag: etag), at: "/g")
        #expect(
            try RawHTTPClient.request(port: server.port, path: "/g", headers: segmentHeaders(segments[2])).status
                == 206)
        #expect(server.queuedCount(for: "/f", whenRangeStartsAt: 200_000) == 1)

        // The matching request takes it in place of the FIFO queue, which keeps its one-shot.
        server.enqueue(behavior: Behavior(maxPartialLength: 10), for: "/f")
        let target = try RawHTTPClient.request(port: server.port, path: "/f", headers: segmentHeaders(segments[2]))
        #expect(target.status == 502)
        #expect(server.queuedCount(for: "/f", whenRangeStartsAt: 200_000) == 0)
        #expect(server.queuedCount(for: "/f") == 1, "the FIFO one-shot is still queued")
        server.clearQueue(for: "/f")

        // Taken once: the same segment is served normally again.
        expectPartial(
            try RawHTTPClient.request(port: server.port, path: "/f", headers: segmentHeaders(segments[2])), segments[2])
    }

    @Test("An open range matches too, several one-shots for one start are taken in order, and clearQueue drops them")
    func openRangeOrderAndClear() throws {
        let server = try makeServer()
        defer { server.shutdown() }
        server.enqueue(behavior: Behavior(status: 500), for: "/f", whenRangeStartsAt: 300_000)
        server.enqueue(behavior: Behavior(status: 503, retryAfter: "7"), for: "/f", whenRangeStartsAt: 300_000)
        server.enqueue(behavior: Behavior(status: 429), for: "/f", whenRangeStartsAt: 100_000)
        #expect(server.queuedCount(for: "/f") == 3)
        #expect(server.queuedCount(for: "/f", whenRangeStartsAt: 300_000) == 2)

        let first = try RawHTTPClient.request(port: server.port, path: "/f", headers: [("Range", "bytes=300000-")])
        let second = try RawHTTPClient.request(port: server.port, path: "/f", headers: segmentHeaders(segments[3]))
        #expect(first.status == 500)
        #expect(second.status == 503)
        #expect(second.header("Retry-After") == "7")
        #expect(server.queuedCount(for: "/f", whenRangeStartsAt: 300_000) == 0)

        server.clearQueue(for: "/f")
        #expect(server.queuedCount(for: "/f") == 0)
        expectPartial(
            try RawHTTPClient.request(port: server.port, path: "/f", headers: segmentHeaders(segments[1])), segments[1])
    }

    @Test("A keyed scripted response answers only its segment among parallel requests")
    func scriptedAmongParallel() async throws {
        let server = try makeServer()
        defer { server.shutdown() }
        server.enqueue(ScriptedResponse(status: 500, text: "boom"), for: "/f", whenRangeStartsAt: 100_000)
        let tasks = startSegments(on: server)
        for (index, task) in tasks.enumerated() {
            let response = try await task.value.response
            if index == 1 {
                #expect(response.status == 500)
                #expect(response.text == "boom")
            } else {
                expectPartial(response, segments[index])
            }
        }
        #expect(server.queuedCount(for: "/f") == 0)
    }

    @Test("A gate in a keyed behavior holds only that segment while the others finish")
    func gateHoldsOneSegment() async throws {
        let server = try makeServer()
        defer { server.shutdown() }
        let gate = BodyGate(holdingAfter: 1000)
        server.enqueue(behavior: Behavior(gate: gate), for: "/f", whenRangeStartsAt: 100_000)
        let tasks = startSegments(on: server)
        #expect(await gate.waitUntilHeld())
        for index in [0, 2, 3] {
            expectPartial(try await tasks[index].value.response, segments[index])
        }
        #expect(gate.heldCount == 1)
        #expect(gate.arrivals == 1)
        #expect(await ParallelClients.waitUntil { server.concurrentRequests(for: "/f") == 1 })
        gate.open()
        expectPartial(try await tasks[1].value.response, segments[1])
        #expect(gate.arrivals == 1, "no other response ever reached the gate")

        // The request log shows every segment request as a closed range with If-Range.
        let recorded = server.requests(for: "/f")
        #expect(recorded.count == 4)
        #expect(Set(recorded.compactMap(\.closedByteRange)) == Set(segments))
        #expect(Set(recorded.compactMap(\.rangeStart)) == Set(segments.map(\.lowerBound)))
        #expect(recorded.allSatisfy { $0.ifRange == etag && $0.range?.hasPrefix("bytes=") == true })
        #expect(recorded.allSatisfy { !$0.wasOverloaded })
    }

    @Test("ignoreRange in a keyed behavior gives that one segment a 200 with the whole body")
    func wholeBodyForOneSegment() async throws {
        let server = try makeServer()
        defer { server.shutdown() }
        server.enqueue(behavior: Behavior(ignoreRange: true), for: "/f", whenRangeStartsAt: 300_000)
        let tasks = startSegments(on: server)
        for (index, task) in tasks.enumerated() {
            let response = try await task.value.response
            if index == 3 {
                #expect(response.status == 200)
                #expect(response.header("Content-Range") == nil)
                #expect(response.header("Content-Length") == String(Self.length))
                #expect(response.header("ETag") == etag)
                expectSameBytes(response.body, content)
            } else {
                expectPartial(response, segments[index])
            }
        }
    }

    @Test("The range accessors of a recorded request")
    func recordedRangeAccessors() {
        func recorded(_ range: String?) -> RecordedRequest {
            var headers = [HeaderField("Host", "x"), HeaderField("If-Range", "\"v\"")]
            if let range { headers.append(HeaderField("range", range)) }
            return RecordedRequest(method: "GET", target: "/f", path: "/f", headers: headers)
        }
        #expect(recorded("bytes=5-9").closedByteRange == 5...9)
        #expect(recorded("bytes=5-9").rangeStart == 5)
        #expect(recorded("bytes=5-9").range == "bytes=5-9")
        #expect(recorded("bytes=5-9").ifRange == "\"v\"")
        #expect(recorded("bytes=5-").closedByteRange == nil)
        #expect(recorded("bytes=5-").rangeStart == 5)
        #expect(recorded("bytes=-5").rangeStart == nil)
        #expect(recorded("bytes=0-1,5-9").closedByteRange == nil)
        #expect(recorded("bytes=0-1,5-9").rangeStart == nil)
        #expect(recorded("items=0-1").rangeStart == nil)
        #expect(recorded(nil).range == nil)
        #expect(!recorded(nil).wasOverloaded)
    }
}
