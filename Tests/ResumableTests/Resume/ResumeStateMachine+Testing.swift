import Foundation

@testable import Resumable

/// Conveniences for driving the machine by hand in tests: a state for a URL or a token, and read-only views
/// of the state the actions were decided on.
extension ResumeStateMachine {
    typealias HeadDecision = HeadAction

    static let testDirectory = URL(fileURLWithPath: "/tmp", isDirectory: true)

    init(url: URL, headers: [HTTPHeader], maximumRedirects: Int, sensitiveHeaderNames: Set<String> = []) {
        let state = ResumeState(
            url: url, headers: headers, sensitiveHeaderNames: sensitiveHeaderNames,
            destination: .directory(Self.testDirectory), tempPath: "/tmp/" + TemporaryFileName.make(),
            createdAt: Date())
        self.init(state: state, maximumRedirects: maximumRedirects)
    }

    init(token: ResumeToken, bytesOnDisk: Int64, replacingURL: URL?, headers: [HTTPHeader], maximumRedirects: Int) {
        let state = ResumeState(
            token: token, destination: .directory(Self.testDirectory), tempPath: token.tempPath,
            bytesOnDisk: bytesOnDisk, replacingURL: replacingURL, headers: headers, sensitiveHeaderNames: [])
        self.init(state: state, maximumRedirects: maximumRedirects)
    }

    var offset: Int64 { state.offset }
    var expectedLength: Int64? { state.expectedLength }
    var validators: Validators { state.validators }
    var url: URL { state.url }
}

extension ResumeStateMachine.RequestPlan {
    var headers: [HTTPHeader] { request.headers }
    var offset: Int64 { request.offset }
    var url: URL { request.url }
}

extension ResumeStateMachine.HeadAction {
    /// The body's offset and restart reason when the body is to be written.
    var written: (offset: Int64, newFile: RestartReason?)? {
        guard case .writeBody(let plan) = self else { return nil }
        return (plan.offset, plan.newFile)
    }
}
