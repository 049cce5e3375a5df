import Foundation

/// The redirects followed since the last response that was not a redirect: a small value that says
/// where to go next or why not (in the spirit of async-http-client's `RedirectState`).
struct RedirectState: Hashable, Sendable {
    /// How many redirects one request may follow.
    let maximum: Int
    private var visited: [URL] = []

    init(maximum: Int) {
        self.maximum = maximum
    }

    /// The target of a redirect from `url` to `location`, or the error that refuses it.
    mutating func follow(from url: URL, status: Int, location: String?) -> Result<URL, ResumableError> {
        guard let location, let target = URL(string: location, relativeTo: url)?.absoluteURL else {
            return .failure(ResumableError(.redirect, "a \(status) redirect without a usable Location header"))
        }
        if let problem = HTTPURL.problem(with: target) {
            return .failure(
                ResumableError(
                    .redirect, "refusing a redirect to \(HTTPURL.excerpt(target.absoluteString)): \(problem)"))
        }
        visited.append(url)
        guard visited.count <= maximum else {
            return .failure(ResumableError(.redirect, "more than \(maximum) redirects"))
        }
        // A URL may redirect to itself once (to set state); a third visit is a loop.
        guard visited.filter({ $0 == target }).count < 2 else {
            return .failure(ResumableError(.redirect, "redirect loop at \(target.absoluteString)"))
        }
        return .success(target)
    }

    /// A response that is not a redirect ends the chain.
    mutating func reset() {
        visited.removeAll()
    }
}
