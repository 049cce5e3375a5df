import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A transport on Foundation's `URLSession` data tasks with a streaming delegate.
///
/// Portable: it is what Apple platforms use, and the fallback on Linux. `URLSessionDownloadTask` is not
/// used because its resume data is unimplemented in swift-corelibs-foundation.
struct URLSessionTransport: HTTPTransport {
    func execute(_ request: TransportRequest, consumer: some ResponseConsumer) async throws(ResumableError) {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = "GET"
        urlRequest.cachePolicy = .reloadIgnoringLocalAndRemoteCacheData
        urlRequest.httpShouldHandleCookies = false
        let seconds =
            Double(request.idleTimeout.components.seconds)
            + Double(request.idleTimeout.components.attoseconds) / 1e18
        urlRequest.timeoutInterval = seconds
        for header in request.headers {
            urlRequest.addValue(header.value, forHTTPHeaderField: header.name)
        }

        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.timeoutIntervalForRequest = seconds
        configuration.requestCachePolicy = .reloadIgnoringLocalAndRemoteCacheData

        let delegate = StreamingDelegate(consumer: consumer)
        let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.dataTask(with: urlRequest)
        let outcome: Result<Void, ResumableError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                delegate.start(task, continuation: continuation)
            }
        } onCancel: {
            delegate.cancel()
        }
        try outcome.get()
    }
}

/// Bridges `URLSessionDataDelegate` callbacks to a ``ResponseConsumer``.
private final class StreamingDelegate<Consumer: ResponseConsumer>: NSObject, URLSessionDataDelegate, Sendable {
    private struct State {
        var continuation: CheckedContinuation<Result<Void, ResumableError>, Never>?
        var task: URLSessionDataTask?
        var consumerError: ResumableError?
        var declined = false
        var cancelled = false
    }

    private let consumer: Consumer
    private let state = Mutex(State())

    init(consumer: Consumer) {
        self.consumer = consumer
    }

    func start(_ task: URLSessionDataTask, continuation: CheckedContinuation<Result<Void, ResumableError>, Never>) {
        let cancelled = state.withLock { state in
            state.continuation = continuation
            state.task = task
            return state.cancelled
        }
        if cancelled {
            finish(.failure(ResumableError(.cancelled, "the request was cancelled")))
        } else {
            task.resume()
        }
    }

    func cancel() {
        let task = state.withLock { state in
            state.cancelled = true
            return state.task
        }
        task?.cancel()
    }

    private func finish(_ result: Result<Void, ResumableError>) {
        let continuation = state.withLock { state in
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume(returning: result)
    }

    func urlSession(
        _ session: URLSession,
        dataTask: URLSessionDataTask,
        didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        guard let http = response as? HTTPURLResponse else {
            state.withLock { $0.consumerError = ResumableError(.protocolViolation, "the response is not HTTP") }
            completionHandler(.cancel)
            return
        }
        var headers: [HTTPHeader] = []
        for (name, value) in http.allHeaderFields {
            headers.append(HTTPHeader(name: "\(name)", value: "\(value)"))
        }
        if consumer.receive(ResponseHead(status: http.statusCode, headers: headers)) {
            completionHandler(.allow)
        } else {
            state.withLock { $0.declined = true }
            completionHandler(.cancel)
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let delivered = data.withUnsafeBytes { buffer in
            Result { () throws(ResumableError) in try consumer.receive(buffer) }
        }
        if case .failure(let error) = delivered {
            state.withLock { $0.consumerError = error }
            dataTask.cancel()
        }
    }

    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        // The engine follows redirects itself, so it can bound hops, detect loops and drop credentials.
        completionHandler(nil)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let (consumerError, declined, cancelled) = state.withLock { ($0.consumerError, $0.declined, $0.cancelled) }
        if let consumerError {
            finish(.failure(consumerError))
        } else if declined {
            finish(.success(()))
        } else if cancelled {
            finish(.failure(ResumableError(.cancelled, "the request was cancelled")))
        } else if let error {
            finish(.failure(Self.classify(error)))
        } else {
            finish(.success(()))
        }
    }

    private static func classify(_ error: any Error) -> ResumableError {
        let nsError = error as NSError
        let sendable = URLError(URLError.Code(rawValue: nsError.code) ?? .unknown)
        switch nsError.code {
        case URLError.timedOut.rawValue:
            return ResumableError(.timedOut, "the server stopped sending", underlying: sendable)
        case URLError.cancelled.rawValue:
            return ResumableError(.cancelled, "the request was cancelled", underlying: sendable)
        case URLError.unsupportedURL.rawValue, URLError.badURL.rawValue:
            return ResumableError(.invalidRequest, "the URL cannot be requested", underlying: sendable)
        case URLError.badServerResponse.rawValue, URLError.cannotParseResponse.rawValue:
            return ResumableError(.protocolViolation, "the server's answer is not valid HTTP", underlying: sendable)
        default:
            return ResumableError(.network, nsError.localizedDescription, underlying: sendable)
        }
    }
}
