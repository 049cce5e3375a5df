import Foundation
import Testing

@testable import Resumable

@Suite("Resume token version 2: completed ranges")
struct ResumeTokenVersion2Tests {
    @Test("A version 2 token decodes its ranges and encodes them back unchanged")
    func roundTrip() throws {
        let data = try Data(contentsOf: Fixtures.url("tokens/valid/with-ranges.json"))
        let token = try ResumeToken(jsonData: data)
        #expect(token.version == 2)
        #expect(token.completedRanges == [2_097_152..<3_145_728, 3_670_016..<4_194_304])
        let again = try ResumeToken(jsonData: token.jsonData())
        #expect(again == token)
        let json = try #require(String(data: token.jsonData(), encoding: .utf8))
        #expect(json.contains("\"ranges\""))
    }

    @Test("A token without ranges is written as version 1, without a ranges key, readable by older releases")
    func withoutRangesIsVersion1() throws {
        let data = try Data(contentsOf: Fixtures.url("tokens/valid/minimal.json"))
        let token = try ResumeToken(jsonData: data)
        #expect(token.version == 1)
        #expect(token.completedRanges.isEmpty)
        let json = try #require(String(data: token.jsonData(), encoding: .utf8))
        #expect(!json.contains("\"ranges\""))
        #expect(json.contains("\"version\" : 1"))
    }

    @Test("A version 3 token is refused as newer, naming the versions this release reads")
    func newerRefused() throws {
        let data = try Data(contentsOf: Fixtures.url("tokens/invalid/unknown-version.json"))
        let error = #expect(throws: ResumableError.self) { try ResumeToken(jsonData: data) }
        #expect(error?.code == .newerTokenVersion)
        #expect(error?.message.contains("1 to 2") == true)
    }

    @Test("The state a version 2 token describes asks only the first gap, and trusts bytes up to the last range")
    func resumeAsksTheGap() throws {
        let data = try Data(contentsOf: Fixtures.url("tokens/valid/with-ranges.json"))
        let token = try ResumeToken(jsonData: data)
        var machine = ResumeStateMachine(
            token: token, bytesOnDisk: 4_194_304, replacingURL: nil, headers: [], maximumRedirects: 5)
        let plan = machine.nextRequest()
        #expect(plan.headers.first { $0.name == "Range" }?.value == "bytes=1048576-2097151")
        #expect(plan.headers.first { $0.name == "If-Range" }?.value == token.etag)
        #expect(plan.trustedLength == 4_194_304)
        #expect(plan.newFile == nil)
    }

    @Test("A file shorter than the token's ranges keeps only the ranges it still holds")
    func shorterFileClipsRanges() throws {
        let data = try Data(contentsOf: Fixtures.url("tokens/valid/with-ranges.json"))
        let token = try ResumeToken(jsonData: data)
        var machine = ResumeStateMachine(
            token: token, bytesOnDisk: 2_500_000, replacingURL: nil, headers: [], maximumRedirects: 5)
        let plan = machine.nextRequest()
        #expect(plan.trustedLength == 2_500_000)
        #expect(machine.state.token().completedRanges == [2_097_152..<2_500_000])
    }

    @Test("Filling the gap joins the prefix with the next completed range")
    func fillingTheGapJoins() throws {
        let data = try Data(contentsOf: Fixtures.url("tokens/valid/with-ranges.json"))
        let token = try ResumeToken(jsonData: data)
        var machine = ResumeStateMachine(
            token: token, bytesOnDisk: 4_194_304, replacingURL: nil, headers: [], maximumRedirects: 5)
        _ = machine.nextRequest()
        let head = ResponseHead(
            status: 206,
            headers: [
                HTTPHeader(name: "Content-Range", value: "bytes 1048576-2097151/4194304"),
                HTTPHeader(name: "Content-Length", value: "1048576"),
                HTTPHeader(name: "ETag", value: token.etag!),
            ])
        #expect(machine.receive(head).written?.offset == 1_048_576)
        _ = try machine.receiveBody(count: 1_048_576)
        #expect(machine.offset == 3_145_728)
        guard case .requestAgain = machine.responseEnded(error: nil) else {
            Issue.record("expected another request for the next gap")
            return
        }
        let next = machine.nextRequest()
        #expect(next.headers.first { $0.name == "Range" }?.value == "bytes=3145728-3670015")
    }

    @Test("A 206 running on into a completed range is read up to that range only; nothing on disk is dropped")
    func overlongPartialStopsAtTheRange() throws {
        let data = try Data(contentsOf: Fixtures.url("tokens/valid/with-ranges.json"))
        let token = try ResumeToken(jsonData: data)
        var machine = ResumeStateMachine(
            token: token, bytesOnDisk: 4_194_304, replacingURL: nil, headers: [], maximumRedirects: 5)
        _ = machine.nextRequest()
        let head = ResponseHead(
            status: 206,
            headers: [
                HTTPHeader(name: "Content-Range", value: "bytes 1048576-4194303/4194304"),
                HTTPHeader(name: "ETag", value: token.etag!),
            ])
        #expect(machine.receive(head).written?.offset == 1_048_576)
        let first = try machine.receiveBody(upTo: 1_000_000)
        #expect(first.position == 1_048_576 && first.count == 1_000_000)
        #expect(!machine.bodyIsComplete)
        let second = try machine.receiveBody(upTo: 1_000_000)
        #expect(second.count == 48_576)
        #expect(machine.bodyIsComplete)
        #expect(machine.offset == 3_145_728)
        guard case .requestAgain = machine.responseEnded(error: ResumableError(.cancelled, "stopped at the range"))
        else {
            Issue.record("expected the next gap to be asked")
            return
        }
        #expect(machine.nextRequest().newFile == nil)
    }
}
