import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A transport on Foundation's `URLSession` data tasks with a streaming delegate.
///
/// Portable: it is what Apple platforms use, and the fallback on Linux. `URLSessionDownloadTask` is not
/// used because its resume data is unimplemented in swift-corelibs-foundation.
///
/// One instance is one `URLSession`, made at the first request and invalidated by ``close()`` (or when the
/// instance goes away): the requests of a session share its connection pool, so a request after one that ended
/// cleanly reuses the kept-alive connection. One delegate serves every task of the session and routes each
/// callback to the request it belongs to.
///
/// Two things of swift-corelibs-foundation (which drives libcurl) are worked around here:
/// - It reports every header block curl passes as a response of its own: an interim `100 Continue`,
///   `102 Processing` or `103 Early Hints` reaches `urlSession(_:dataTask:didReceive:completionHandler:)` before
///   the final response does, with the final one following it. Interim responses (1xx but 101) are skipped, so
///   the consumer sees only the final head. Apple's Foundation never reports them there.
/// - It ignores the disposition given to that callback's completion handler, so `.cancel` alone would let the
///   body flow on. A declined head cancels the data task as well, and nothing after it reaches the consumer.
/// - The completion handler of `urlSession(_:task:willPerformHTTPRedirection:newRequest:completionHandler:)` traps
///   the process when the task was cancelled or timed out while the call waited on the delegate queue (see
///   ``TaskRouter``). It is never called: a redirect's head reaches the consumer from that call, and the task is
///   cancelled there; the redirect's body is never read.
///
/// Memory is bounded on Linux by the session's delegate queue, a ``URLSessionDeliveryQueue``: while 64 callbacks
/// (1 MiB) wait for the consumer, the session stops reading from the socket, because swift-corelibs-foundation
/// would otherwise queue the whole body for a slow writer, and its `URLSessionTask.suspend()` restarts the request
/// instead of pausing it. On Apple platforms the session uses a delegate queue of its own (untested there).
final class URLSessionTransport: TransportSession {
    /// The idle timeout as a `TimeInterval` URLSession can take: from 1 ms to 10^9 s (about 31.7 years), for any
    /// `Duration`.
    ///
    /// swift-corelibs-foundation computes `Int(timeoutInterval) * 1000` milliseconds, which traps from about
    /// 9.2 × 10^15 s, and hands that to Dispatch in nanoseconds; `Duration.components` itself traps beyond
    /// `Int64.max` seconds. A timeout of zero or less is not "none" but the shortest one.
    static func timeoutInterval(_ idleTimeout: Duration) -> TimeInterval {
        let clamped = min(max(idleTimeout, .milliseconds(1)), .seconds(1_000_000_000))
        return Double(clamped.components.seconds) + Double(clamped.components.attoseconds) / 1e18
    }

    /// The idle timeout handed to FoundationNetworking: ``timeoutInterval(_:)`` rounded up to whole seconds.
    /// swift-corelibs-foundation arms its idle timer with `Int(timeoutInterval) * 1000` ms: the fraction is dropped, so
    /// 900 ms would fire after 0 ms (1 ms after the request starts or after any chunk) and 1.9 s after 1 s. Rounded
    /// up, it is at most a second longer than asked, never shorter. (The connect watchdog keeps the exact value.)
    static func requestTimeoutInterval(_ idleTimeout: Duration) -> TimeInterval {
        timeoutInterval(idleTimeout).rounded(.up)
    }

    private struct State {
        var session: URLSession?
        var closed = false
    }

    /// Cancels the session's tasks without meeting FoundationNetworking's cancel-versus-completion trap.
    private let cancellation = URLSessionCancellation()
    private let router: TaskRouter
    private let state = Mutex(State())
    /// Set at once by ``close()`` (and `deinit`); the rest of closing runs on ``calls``.
    private let closing = SessionClosing()
    /// Where this transport calls URLSession: making, resuming and cancelling tasks, invalidating the session.
    ///
    /// Those calls wait (`DispatchQueue.sync`) for a work queue that FoundationNetworking's sessions share, which a
    /// fast transfer's socket events or a held delegate callback can keep busy for seconds. Made on Swift
    /// concurrency's cooperative pool (where requests start, end and are cancelled), they blocked its threads, one per
    /// core, and with them every task of the process: a test process stalled for minutes. A serial queue of the
    /// transport's own runs them on a thread of libdispatch's overcommit pool instead, in the order they were asked
    /// for; nothing on the pool waits for them.
    private let calls = DispatchQueue(label: "Resumable URLSession calls")
    #if canImport(FoundationNetworking)
        /// The session's delegate queue, which bounds what waits for the consumer.
        private let deliveryQueue: URLSessionDeliveryQueue
    #endif

    /// When the session's delegate queue holds the network back (Linux only).
    let flowControl: URLSessionFlowControl
    /// When any request of the session last delivered to its consumer (see ``TransferActivity``).
    private let deliveries = TransferActivity()

    /// A transport whose delegate queue holds the network back at `flowControl`'s marks (Linux only).
    init(flowControl: URLSessionFlowControl = .default) {
        self.flowControl = flowControl
        router = TaskRouter(cancellation: cancellation)
        #if canImport(FoundationNetworking)
            deliveryQueue = URLSessionDeliveryQueue(limits: flowControl)
        #endif
    }

    /// What the delegate queue did so far; all zero on Apple platforms, where it is not bounded here.
    var deliveryStatistics: URLSessionDeliveryStatistics {
        #if canImport(FoundationNetworking)
            deliveryQueue.currentStatistics
        #else
            URLSessionDeliveryStatistics()
        #endif
    }

    /// The session's delegate queue: `nil` (a serial queue of URLSession's own) on Apple platforms.
    private var delegateQueue: OperationQueue? {
        #if canImport(FoundationNetworking)
            deliveryQueue
        #else
            nil
        #endif
    }

    deinit {
        // Nothing else holds the transport, so no block on `calls` is pending (each holds it): the session is taken
        // here, and only what outlives the transport goes to `calls`.
        closing.set()
        #if canImport(FoundationNetworking)
            deliveryQueue.release()
        #endif
        let session = takeSession()
        let router = router
        calls.async {
            Self.shutDown(session, router: router)
        }
    }

    func execute(_ request: TransportRequest, consumer: some ResponseConsumer) async throws(ResumableError) {
        try Self.checkProxy(for: request)
        try Self.checkTLS(for: request)
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = "GET"
        urlRequest.cachePolicy = .reloadIgnoringLocalAndRemoteCacheData
        urlRequest.httpShouldHandleCookies = false
        let seconds = Self.requestTimeoutInterval(request.idleTimeout)
        urlRequest.timeoutInterval = seconds
        for header in request.headers {
            urlRequest.addValue(header.value, forHTTPHeaderField: header.name)
        }

        let handler = StreamingHandler(
            consumer: consumer, failureContext: TransportFailure.Context(request), calls: calls, closing: closing,
            cancellation: cancellation, deliveries: deliveries)
        // Made and registered on `calls`, where `close()` invalidates the session: never in between (making a task in
        // an invalidated session traps).
        guard !closing.isSet else { throw TransportSessionClosed.error }
        let urlRequestToSend = urlRequest
        let made: URLSessionDataTask? = await withCheckedContinuation { continuation in
            calls.async { [self] in
                let task = state.withLock { state -> URLSessionDataTask? in
                    guard !state.closed else { return nil }
                    let session =
                        state.session
                        ?? Self.makeSession(
                            timeout: seconds, delegate: router, queue: delegateQueue, cancellation: cancellation)
                    state.session = session
                    let task = session.dataTask(with: urlRequestToSend)
                    router.register(handler, for: task)
                    return task
                }
                continuation.resume(returning: task)
            }
        }
        guard let task = made else { throw TransportSessionClosed.error }
        defer { router.remove(task) }
        // URLSession shows no connect phase: the connect timeout bounds the wait for the head (see ConnectWatchdog).
        let watchdog = ConnectWatchdog(timeout: request.connectTimeout) { handler.connectTimedOut() }
        defer { watchdog.cancel() }
        // FoundationNetworking re-arms its own idle timer on every header line, a chunked body's trailer fields too:
        // a server that sends them forever, and never a byte of data, would hold the request as long as it likes.
        let idleWatchdog = IdleWatchdog(timeout: request.idleTimeout, activity: handler.activity) {
            handler.idleTimedOut(after: request.idleTimeout)
        }
        defer { idleWatchdog.cancel() }
        let outcome: Result<Void, ResumableError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                handler.start(task, continuation: continuation)
            }
        } onCancel: {
            handler.cancel()
        }
        try outcome.get()
    }

    /// Invalidates the session, cancelling a request still running; later requests fail.
    ///
    /// Returns at once: requests asked for from now on fail, and the invalidation and the end of the requests still
    /// running follow on ``calls`` (see there: they must not block the caller, often Swift concurrency's pool).
    func close() {
        guard closing.set() else { return }
        // Before the delivery queue lets the session run again: a transfer that ends in between (its error, or even
        // its success) must not decide how a request the caller closed ends.
        router.markAllClosing()
        #if canImport(FoundationNetworking)
            // First, so that the invalidation never waits for a work queue suspended by a full delivery queue.
            deliveryQueue.release()
        #endif
        calls.async { [self] in
            Self.shutDown(takeSession(), router: router)
        }
    }

    /// Cancels every request's task, lets the session end once they all have, and ends the requests at once.
    ///
    /// Not `URLSession.invalidateAndCancel()`: in swift-corelibs-foundation it reads the session's task registry off
    /// the session's work queue, racing the tasks that end meanwhile (a crash, seen in a fault soak), and cancels
    /// without ``URLSessionCancellation``'s fence. `finishTasksAndInvalidate()` does its work on the work queue.
    private static func shutDown(_ session: URLSession?, router: TaskRouter) {
        router.cancelAll()
        session?.finishTasksAndInvalidate()
        router.abandonAll()
    }

    /// Marks the transport closed and takes its session, if it made one.
    private func takeSession() -> URLSession? {
        state.withLock { state in
            state.closed = true
            defer { state.session = nil }
            return state.session
        }
    }

    private static func makeSession(
        timeout: TimeInterval, delegate: TaskRouter, queue: OperationQueue?, cancellation: URLSessionCancellation
    ) -> URLSession {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.timeoutIntervalForRequest = timeout
        configuration.requestCachePolicy = .reloadIgnoringLocalAndRemoteCacheData
        let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: queue)
        cancellation.attach(to: session)
        #if canImport(FoundationNetworking)
            (queue as? URLSessionDeliveryQueue)?.attach(to: session)
        #endif
        return session
    }
}

/// What the session's delegate hands each request: the callbacks of its own data task.
private protocol RoutedRequest: AnyObject, Sendable {
    func didReceive(
        _ response: URLResponse,
        dataTask: URLSessionDataTask,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void)
    func didReceive(_ data: Data, dataTask: URLSessionDataTask)
    /// A redirect's head arrived (`willPerformHTTPRedirection`): the request ends with it, and `task` must be
    /// cancelled (see ``TaskRouter``).
    func didRedirect(_ response: HTTPURLResponse, task: URLSessionTask)
    /// The task completed; `response` is its last response, which FoundationNetworking may never have reported (a
    /// redirect without a usable `Location`).
    func didComplete(error: (any Error)?, response: URLResponse?)
    /// Ends the request at once with a cancellation: its session was closed.
    func abandon()
    /// The session is closing and is about to cancel the task: from now on the request ends as cancelled, whatever
    /// error FoundationNetworking reports for the cancelled transfer, and nothing more reaches the consumer.
    func markClosing()
}

/// The delegate of a session: routes each task's callbacks to its request, by task identifier.
///
/// Callbacks come one at a time on the session's serial delegate queue.
private final class TaskRouter: NSObject, URLSessionDataDelegate, Sendable {
    private struct Routed {
        var request: any RoutedRequest
        var task: URLSessionTask
    }

    private let requests = Mutex<[Int: Routed]>([:])
    private let cancellation: URLSessionCancellation

    init(cancellation: URLSessionCancellation) {
        self.cancellation = cancellation
    }

    func register(_ request: any RoutedRequest, for task: URLSessionTask) {
        requests.withLock { $0[task.taskIdentifier] = Routed(request: request, task: task) }
    }

    func remove(_ task: URLSessionTask) {
        _ = requests.withLock { $0.removeValue(forKey: task.taskIdentifier) }
    }

    /// Ends every registered request with a cancellation.
    func abandonAll() {
        let all = requests.withLock { requests in
            defer { requests.removeAll() }
            return Array(requests.values)
        }
        for routed in all { routed.request.abandon() }
    }

    /// Tells every registered request that the session is closing (see ``RoutedRequest/markClosing()``).
    func markAllClosing() {
        let all = requests.withLock { Array($0.values) }
        for routed in all { routed.request.markClosing() }
    }

    /// Cancels the task of every registered request (resumed or not), so that the session can end.
    func cancelAll() {
        let all = requests.withLock { Array($0.values) }
        for routed in all {
            routed.request.markClosing()
            cancellation.cancel(routed.task)
        }
    }

    private func request(for task: URLSessionTask) -> (any RoutedRequest)? {
        requests.withLock { $0[task.taskIdentifier]?.request }
    }

    func urlSession(
        _ session: URLSession,
        dataTask: URLSessionDataTask,
        didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        guard let request = request(for: dataTask) else {
            completionHandler(.cancel)
            cancellation.cancel(dataTask)
            return
        }
        request.didReceive(response, dataTask: dataTask, completionHandler: completionHandler)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        request(for: dataTask)?.didReceive(data, dataTask: dataTask)
    }

    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        // The engine follows redirects itself, so it can bound hops, detect loops and drop credentials: the redirect
        // is the request's answer. `completionHandler` is never called, whatever the answer. swift-corelibs-foundation
        // waits for it in a state of its own (`waitingForRedirectCompletionHandler`), which a cancel
        // (`stopLoading()`) or the request's idle timer leaves, on the task's work queue, while this call waits on
        // the delegate queue: behind other requests' callbacks, for as long as a slow consumer takes. Called after
        // either, the handler traps the process ("Received callback for HTTP redirection, but we're not waiting for
        // it", `HTTPURLProtocol.swift`). Cancelling the task instead ends it from any of those states, with a failure
        // report the request reads as the redirect's end (its head reached the consumer) or as the cancel it was.
        guard let routed = self.request(for: task) else {
            cancellation.cancel(task)
            return
        }
        routed.didRedirect(response, task: task)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        cancellation.willComplete(task)
        request(for: task)?.didComplete(error: error, response: task.response)
    }
}

/// Bridges one data task's callbacks to a ``ResponseConsumer``.
private final class StreamingHandler<Consumer: ResponseConsumer>: RoutedRequest {
    private struct State {
        var continuation: CheckedContinuation<Result<Void, ResumableError>, Never>?
        var task: URLSessionDataTask?
        var consumerError: ResumableError?
        /// A final response head came from the session, whether or not it reached the consumer.
        var headArrived = false
        var headDelivered = false
        var declined = false
        var cancelled = false
        /// Set when the outcome is decided: nothing more reaches the consumer.
        var finished = false

        /// Whether body bytes may still go to the consumer.
        var acceptsBody: Bool {
            headDelivered && !declined && !cancelled && !finished && consumerError == nil
        }
    }

    private let consumer: Consumer
    private let state = Mutex(State())
    /// When the head or the last body bytes reached the consumer, for the ``IdleWatchdog``.
    let activity: TransferActivity
    /// Held while the consumer is called; its value is set by ``abandon()``, which takes it so that it returns
    /// only when no call is under way and none can follow.
    private let delivery = Mutex(false)

    /// What an error message names; see ``TransportFailure``.
    private let failureContext: TransportFailure.Context

    /// The transport's queue for URLSession calls (see ``URLSessionTransport``): resuming and cancelling the task.
    private let calls: DispatchQueue
    /// Whether the transport is closing: its session is, or is about to be, invalidated on `calls`.
    private let closing: SessionClosing
    /// What cancels the task (never `URLSessionTask.cancel()` directly; see ``URLSessionCancellation``).
    private let cancellation: URLSessionCancellation

    init(
        consumer: Consumer, failureContext: TransportFailure.Context, calls: DispatchQueue, closing: SessionClosing,
        cancellation: URLSessionCancellation, deliveries: TransferActivity
    ) {
        self.consumer = consumer
        activity = TransferActivity(session: deliveries)
        self.failureContext = failureContext
        self.calls = calls
        self.closing = closing
        self.cancellation = cancellation
    }

    /// Runs `body` on `calls` unless the transport is closing. A task must not be resumed once its session is being
    /// invalidated, and the closing cancels every task anyway. Checked on `calls`, where the closing runs: one asked
    /// for after this check runs after `body`.
    private func whileOpen(_ body: @escaping @Sendable () -> Void) {
        let closing = closing
        calls.async {
            guard !closing.isSet else { return }
            body()
        }
    }

    func start(_ task: URLSessionDataTask, continuation: CheckedContinuation<Result<Void, ResumableError>, Never>) {
        let (cancelled, finished, earlyError) = state.withLock { state in
            state.continuation = continuation
            state.task = task
            return (state.cancelled, state.finished, state.consumerError)
        }
        if finished {
            // Abandoned before it started (the closing cancelled the task): finish resumes the continuation stored
            // just now.
            finish(.failure(TransportSessionClosed.error))
        } else if cancelled {
            // Cancelled, or timed out, before it started. The task, made but never resumed, is cancelled too, at once
            // and not only while the transport is open: the request leaves the router now, so a closing would not
            // see it, and a task left suspended in the session keeps `finishTasksAndInvalidate()` from ever ending
            // the session.
            cancellation.cancel(task)
            finish(.failure(earlyError ?? ResumableError(.cancelled, "the request was cancelled")))
        } else {
            whileOpen { task.resume() }
        }
    }

    func cancel() {
        let task = state.withLock { state in
            state.cancelled = true
            return state.task
        }
        if let task { whileOpen { [cancellation] in cancellation.cancel(task) } }
    }

    /// Called by ``URLSessionTransport/close()`` before the session is let go, and again before the task is
    /// cancelled: the request ends as cancelled, whatever the session reports for it from now on.
    func markClosing() {
        state.withLock { $0.cancelled = true }
    }

    func abandon() {
        state.withLock { state in
            state.cancelled = true
        }
        delivery.withLock { $0 = true }
        finish(.failure(TransportSessionClosed.error))
    }

    private func finish(_ result: Result<Void, ResumableError>) {
        let continuation = state.withLock { state in
            state.finished = true
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume(returning: result)
    }

    func didReceive(
        _ response: URLResponse,
        dataTask: URLSessionDataTask,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        guard let http = response as? HTTPURLResponse else {
            state.withLock { $0.consumerError = ResumableError(.protocolViolation, "the response is not HTTP") }
            completionHandler(.cancel)
            cancellation.cancel(dataTask)
            return
        }
        if (100...199).contains(http.statusCode) && http.statusCode != 101 {
            // An interim response (see the type's notes): the final one follows.
            completionHandler(.allow)
            return
        }
        let deliver = state.withLock { state in
            state.headArrived = true
            guard !state.headDelivered, !state.finished, !state.cancelled else { return false }
            state.headDelivered = true
            return true
        }
        guard deliver else {
            completionHandler(.cancel)
            cancellation.cancel(dataTask)
            return
        }
        let head = Self.head(of: http)
        let accepted = delivery.withLock { abandoned in
            activity.begin()
            defer { activity.end() }
            return !abandoned && consumer.receive(head)
        }
        if accepted {
            completionHandler(.allow)
        } else {
            state.withLock { $0.declined = true }
            completionHandler(.cancel)
            // swift-corelibs-foundation ignores the disposition: cancel the task so the body stops here.
            cancellation.cancel(dataTask)
        }
    }

    /// The redirect's head goes to the consumer as any final head does, and the task is cancelled: the request ends
    /// with the head (see ``TaskRouter``).
    func didRedirect(_ response: HTTPURLResponse, task: URLSessionTask) {
        deliverRedirect(response)
        cancellation.cancel(task)
    }

    /// Hands a redirect's head to the consumer as the request's answer, unless a head already went or the request
    /// ended. A consumer that accepts it gets no body (FoundationNetworking keeps a redirect's body to itself), and
    /// the request fails.
    private func deliverRedirect(_ response: HTTPURLResponse) {
        let deliver = state.withLock { state in
            state.headArrived = true
            guard !state.headDelivered, !state.finished, !state.cancelled else { return false }
            state.headDelivered = true
            return true
        }
        guard deliver else { return }
        let head = Self.head(of: response)
        let accepted = delivery.withLock { abandoned in !abandoned && consumer.receive(head) }
        state.withLock { state in
            if accepted {
                state.consumerError = ResumableError(
                    .redirect, "the URLSession transport does not read the body of a \(head.status) redirect")
            } else {
                state.declined = true
            }
        }
    }

    /// The head of `http`, as the consumer receives it.
    private static func head(of http: HTTPURLResponse) -> ResponseHead {
        var headers: [HTTPHeader] = []
        for (name, value) in http.allHeaderFields {
            // The optional whitespace around a value is not part of it (RFC 9110 §5.5), as the libcurl transport
            // reads it: a validator stored by one transport must compare equal when the other resumes.
            headers.append(
                HTTPHeader(name: "\(name)", value: HeadCollector.trimmingWhitespace("\(value)"[...])))
        }
        return ResponseHead(status: http.statusCode, headers: headers)
    }

    func didReceive(_ data: Data, dataTask: URLSessionDataTask) {
        let (accepts, headArrived) = state.withLock { ($0.acceptsBody, $0.headArrived) }
        guard accepts else {
            // A head refused because the request was cancelled or closed first is followed by the rest of its body.
            if !headArrived {
                state.withLock {
                    if $0.consumerError == nil {
                        $0.consumerError = ResumableError(.protocolViolation, "body bytes arrived before the head")
                    }
                }
                cancellation.cancel(dataTask)
            }
            return
        }
        let delivered = delivery.withLock { abandoned -> Result<Void, ResumableError> in
            guard !abandoned else { return .success(()) }
            // A consumer that takes its time (a rate limit, a slow disk) is no idle server.
            activity.begin()
            defer { activity.end() }
            return data.withUnsafeBytes { buffer in
                Result { () throws(ResumableError) in try consumer.receive(buffer) }
            }
        }
        if case .failure(let error) = delivered {
            state.withLock { $0.consumerError = error }
            cancellation.cancel(dataTask)
        }
    }

    func didComplete(error: (any Error)?, response: URLResponse?) {
        // A 301-308 whose `Location` FoundationNetworking cannot follow completes without its head ever reaching the
        // delegate (it skips redirect heads, and asks about the redirect only when it could build the new request):
        // that head is the answer, delivered now, as libcurl delivers it.
        if error == nil, let http = response as? HTTPURLResponse, (300...399).contains(http.statusCode) {
            deliverRedirect(http)
        }
        let (consumerError, declined, cancelled, headDelivered) = state.withLock {
            ($0.consumerError, $0.declined, $0.cancelled, $0.headDelivered)
        }
        if let consumerError {
            finish(.failure(consumerError))
        } else if declined {
            finish(.success(()))
        } else if cancelled {
            finish(.failure(ResumableError(.cancelled, "the request was cancelled")))
        } else if let error {
            finish(.failure(Self.classify(error, context: failureContext)))
        } else if !headDelivered {
            finish(.failure(noFinalResponse))
        } else {
            finish(.success(()))
        }
    }

    /// Maps a URLSession error to the error the libcurl transport gives for the same failure (see
    /// ``TransportFailure``).
    static func classify(_ error: any Error, context: TransportFailure.Context) -> ResumableError {
        let nsError = error as NSError
        let sendable = URLError(URLError.Code(rawValue: nsError.code) ?? .unknown)
        let cause = TransportFailure.urlSession(
            domain: nsError.domain, code: nsError.code, description: nsError.localizedDescription, context: context)
        return TransportFailure.error(
            cause, detail: nsError.localizedDescription, context: context, underlying: sendable)
    }

    /// No data for the idle timeout since the head or the last body bytes (see ``IdleWatchdog``): ends the request with
    /// ``ResumableError/Code/timedOut``, as the libcurl transport does, unless it ended first.
    func idleTimedOut(after timeout: Duration) {
        let task = state.withLock { state -> URLSessionDataTask? in
            guard !state.finished, !state.cancelled, state.consumerError == nil else { return nil }
            state.consumerError = ResumableError(.timedOut, "the server sent no data for \(timeout)")
            state.cancelled = true
            return state.task
        }
        if let task { whileOpen { [cancellation] in cancellation.cancel(task) } }
    }

    /// The connect timeout passed before the response head (see ``ConnectWatchdog``): ends the request with
    /// ``ResumableError/Code/timedOut``, unless the head arrived or the request ended first.
    func connectTimedOut() {
        let task = state.withLock { state -> URLSessionDataTask? in
            guard !state.headDelivered, !state.finished, !state.cancelled, state.consumerError == nil else {
                return nil
            }
            // Recorded like a consumer's error, which `didComplete` reports first; `cancelled` keeps a head that
            // arrives meanwhile from reaching the consumer.
            state.consumerError = TransportFailure.error(
                .connectTimeout, detail: "", context: failureContext, underlying: URLError(.timedOut))
            state.cancelled = true
            return state.task
        }
        if let task { whileOpen { [cancellation] in cancellation.cancel(task) } }
    }
}

/// Set once when a ``URLSessionTransport`` starts closing; shared with its requests' handlers.
final class SessionClosing: Sendable {
    private let flag = Atomic<Bool>(false)

    var isSet: Bool { flag.load(ordering: .acquiring) }

    /// Sets it; returns whether this call did (it was not set before).
    @discardableResult
    func set() -> Bool {
        !flag.exchange(true, ordering: .acquiringAndReleasing)
    }
}
