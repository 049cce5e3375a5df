import Foundation
import LoopbackServer
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Registering a new version of a resource while responses are under way: each response stays with the version
/// it began with, and later requests get the new one with its new validators.
@Suite("Replacing a resource while responses are in flight")
struct InFlightReplacementTests {
    let old = Resource.generatedBytes(seed: 21, range: 0..<300_000)
    let new = Resource.generatedBytes(seed: 22, range: 0..<250_000)
    let oldDate = "Mon, 01 Jan 2024 00:00:00 GMT"
    let newDate = "Tue, 02 Jan 2024 00:00:00 GMT"

    @Test("In-memory content: held responses finish with the old bytes and validators, new requests get the new")
    func inMemory() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = BodyGate(holdingAfter: 100_000)
        server.register(
            .bytes(old, etag: "\"v1\"", lastModified: oldDate, behavior: Behavior(gate: gate)), at: "/f")
        let whole = ParallelClients.start(port: server.port, path: "/f")
        let segment = ParallelClients.start(
            port: server.port, path: "/f", headers: [("Range", "bytes=150000-299999"), ("If-Range", "\"v1\"")])
        #expect(await gate.waitUntilHeld(count: 2))

        server.register(.bytes(new, etag: "\"v2\"", lastModified: newDate), at: "/f")
        let fresh = try RawHTTPClient.request(port: server.port, path: "/f")
        #expect(fresh.status == 200)
        #expect(fresh.header("ETag") == "\"v2\"")
        #expect(fresh.header("Last-Modified") == newDate)
        #expect(fresh.header("Content-Length") == "250000")
        expectSameBytes(fresh.body, new)
        // A segment request still validated against the old version gets the new one whole.
        let stale = try RawHTTPClient.request(
            port: server.port, path: "/f", headers: [("Range", "bytes=150000-299999"), ("If-Range", "\"v1\"")])
        #expect(stale.status == 200)
        #expect(stale.header("ETag") == "\"v2\"")
        expectSameBytes(stale.body, new)
        let current = try RawHTTPClient.request(
            port: server.port, path: "/f", headers: [("Range", "bytes=150000-"), ("If-Range", "\"v2\"")])
        #expect(current.status == 206)
        #expect(current.header("Content-Range") == "bytes 150000-249999/250000")
        expectSameBytes(current.body, Array(new[150_000...]))
        #expect(gate.heldCount == 2, "the new version has no gate; the old responses are still held")

        gate.open()
        let wholeResponse = try await whole.value.response
        #expect(wholeResponse.status == 200)
        #expect(wholeResponse.header("ETag") == "\"v1\"")
        #expect(wholeResponse.header("Last-Modified") == oldDate)
        #expect(wholeResponse.header("Content-Length") == "300000")
        expectSameBytes(wholeResponse.body, old)
        let segmentResponse = try await segment.value.response
        #expect(segmentResponse.status == 206)
        #expect(segmentResponse.header("Content-Range") == "bytes 150000-299999/300000")
        #expect(segmentResponse.header("ETag") == "\"v1\"")
        expectSameBytes(segmentResponse.body, Array(old[150_000...]))
    }

    @Test("A file replaced on disk by rename: the held response keeps the old file, new requests get the new one")
    func fileReplacedByRename() async throws {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("InFlightReplacementTests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("f.bin")
        let staging = directory.appendingPathComponent("f.bin.new")
        try Data(old).write(to: file)

        let server = try LoopbackServer()
        defer { server.shutdown() }
        let gate = BodyGate(holdingAfter: 100_000)
        server.register(Resource(body: .file(file), behavior: Behavior(gate: gate)), at: "/f")
        let oldTag = try #require(server.resource(at: "/f")?.etag)
        let held = ParallelClients.start(port: server.port, path: "/f")
        #expect(await gate.waitUntilHeld())

        try Data(new).write(to: staging)
        #expect(rename(staging.path, file.path) == 0)
        server.register(Resource(body: .file(file)), at: "/f")
        let newTag = try #require(server.resource(at: "/f")?.etag)
        #expect(newTag != oldTag)
        let fresh = try RawHTTPClient.request(port: server.port, path: "/f")
        #expect(fresh.header("ETag") == newTag)
        expectSameBytes(fresh.body, new)

        gate.open()
        let response = try await held.value.response
        #expect(response.header("ETag") == oldTag)
        #expect(response.header("Content-Length") == "300000")
        expectSameBytes(response.body, old)
    }
}
