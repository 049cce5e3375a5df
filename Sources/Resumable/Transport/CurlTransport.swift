import CResumable
import Foundation
import Synchronization

/// A transport that drives libcurl directly, loaded at run time (see ``CurlLibrary``).
///
/// Each request runs on a thread of its own (one an earlier request left idle, see ``ReusedThreads``) with a multi
/// handle and one easy handle: the thread loops `curl_multi_perform` / `curl_multi_poll`, so no Swift concurrency
/// thread ever blocks. The multi handle owns
/// curl's connection cache: with ``connections`` set (a session, from ``DownloadTask/Transport/makeSession()``),
/// each request takes a multi handle an earlier request to the same origin left there, and with it the kept-alive
/// connection (see ``CurlConnectionCache``); without, each request has a multi handle, and so a connection, of its
/// own. Body bytes go from
/// curl's receive buffer straight to the consumer, whose synchronous write is the backpressure: curl reads
/// nothing more from the socket until the callback returns, so memory stays at one buffer per transfer however
/// slow the disk is.
///
/// Cancelling the awaiting task sets a flag and calls `curl_multi_wakeup`, which ends a `curl_multi_poll` at
/// once; the callbacks check the same flag, so a transfer stops within one write callback even while data pours
/// in.
///
/// Requests are HTTP/1.1, or HTTP/2 over TLS when the server offers it (ALPN; see `CurlTransport+TLS.swift`), carry
/// exactly the engine's headers (curl's default `Accept: */*` is removed), never
/// follow redirects, and decode a `Content-Encoding` the server applied despite `Accept-Encoding: identity`,
/// as FoundationNetworking does. The proxy is set explicitly for every request from ``ProxyRules`` (see
/// `CurlTransport+Proxy.swift`), never from curl's own reading of the environment.
struct CurlTransport: TransportSession {
    /// The size of curl's receive buffer: the most one `recv` reads. curl still hands the write callback at most
    /// 16 KiB (`CURL_MAX_WRITE_SIZE`) at a time. Measured on loopback with a 1 GiB file, 512 KiB needs a third
    /// less CPU than curl's default 16 KiB; 1 MiB gains nothing more.
    static let defaultBufferSize = 512 * 1024

    let library: CurlLibrary
    var bufferSize = CurlTransport.defaultBufferSize
    /// Where a request leaves its multi handle, and with it curl's connection cache, for a later request of the
    /// same session to the same origin; `nil`: every request on a multi handle of its own.
    var connections: CurlConnectionCache?

    func execute(_ request: TransportRequest, consumer: some ResponseConsumer) async throws(ResumableError) {
        let transfer = CurlTransfer(
            library: library, request: request, consumer: consumer, bufferSize: bufferSize, connections: connections)
        let outcome: Result<Void, ResumableError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                transfer.start(continuation)
            }
        } onCancel: {
            transfer.cancel()
        }
        try outcome.get()
    }

    /// Closes ``connections``: the kept-alive connections are closed and later requests fail. Without a cache there
    /// is nothing to release.
    func close() {
        connections?.close()
    }
}

/// One request on its own thread. Everything but the cancellation flag and the wakeup belongs to that thread.
private final class CurlTransfer: @unchecked Sendable {
    // @unchecked: `worker` is touched only by the transfer's thread (and by `start` before that thread exists);
    // `cancelled` is atomic; the multi handle is shared with `cancel()` only under `wakeup`'s lock.

    /// What the transfer's thread owns.
    private struct Worker {
        var continuation: CheckedContinuation<Result<Void, ResumableError>, Never>?
        var head = HeadCollector()
        var headDelivered = false
        var declined = false
        var consumerError: ResumableError?
        var callbackError: ResumableError?
        /// Set when the outcome is decided: the callbacks must not reach the consumer any more.
        var finished = false
        var lastActivity = ContinuousClock.now
        /// Set when `curl_multi_perform` failed: the multi handle is not given back for reuse.
        var multiFailed = false
    }

    private let library: CurlLibrary
    private let request: TransportRequest
    private let consumer: any ResponseConsumer
    private let bufferSize: Int
    private let connections: CurlConnectionCache?
    private let cancelled = Atomic<Bool>(false)
    /// The multi handle while it exists, so `cancel()` can wake it; `nil` before and after.
    private let wakeup = Mutex<MultiHandle?>(nil)
    private var worker = Worker()

    init(
        library: CurlLibrary,
        request: TransportRequest,
        consumer: some ResponseConsumer,
        bufferSize: Int,
        connections: CurlConnectionCache?
    ) {
        self.library = library
        self.request = request
        self.consumer = consumer
        self.bufferSize = bufferSize
        self.connections = connections
    }

    func start(_ continuation: CheckedContinuation<Result<Void, ResumableError>, Never>) {
        worker.continuation = continuation
        ReusedThreads.transfers.run { [self] in run() }
    }

    /// Stops the transfer from any thread: the flag is seen by the loop and by every callback.
    func cancel() {
        cancelled.store(true, ordering: .sequentiallyConsistent)
        let table = library.table
        wakeup.withLock { multi in
            if let multi { _ = cresumable_curl_multi_wakeup(table, multi.pointer) }
        }
    }

    private var isCancelled: Bool { cancelled.load(ordering: .sequentiallyConsistent) }

    // MARK: - The transfer's thread

    private func run() {
        // Everything, the multi handle's return to the cache included, is done before the awaiting task goes on,
        // so the task's next request finds the kept-alive connection.
        finish(perform())
    }

    /// Sets up the handles, drives the transfer and tears the handles down again; the defers run in reverse:
    /// remove the easy handle from the multi handle (which returns its connection to the cache), clean it up, and
    /// only then give the multi handle back.
    private func perform() -> Result<Void, ResumableError> {
        let table = library.table
        // The route is decided once: it sets the proxy options and keys the connection cache.
        let route: ProxyRoute
        do throws(ResumableError) {
            route = try ProxyRules().route(for: request.url, proxy: request.proxy)
        } catch {
            return .failure(error)
        }
        let origin = CurlConnectionKey(request, route: route)
        let multi: UnsafeMutableRawPointer
        switch connections?.take(for: self, origin: origin) {
        case .closed:
            return .failure(TransportSessionClosed.error)
        case .idle(let idle):
            multi = idle.pointer
        case .empty, nil:
            guard let made = cresumable_curl_multi_init(table) else {
                return .failure(ResumableError(.network, "curl_multi_init failed"))
            }
            multi = made
        }
        defer {
            if let connections {
                connections.giveBack(
                    MultiHandle(pointer: multi), origin: origin, from: self, reusable: !worker.multiFailed)
            } else {
                _ = cresumable_curl_multi_cleanup(table, multi)
            }
        }
        guard let easy = cresumable_curl_easy_init(table) else {
            return .failure(ResumableError(.network, "curl_easy_init failed"))
        }
        let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CRESUMABLE_CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CRESUMABLE_CURL_ERROR_SIZE))
        var headers: UnsafeMutableRawPointer?
        defer {
            cresumable_curl_easy_cleanup(table, easy)
            if let headers { cresumable_curl_slist_free_all(table, headers) }
            errorBuffer.deallocate()
        }
        do throws(ResumableError) {
            headers = try configure(easy, route: route, errorBuffer: errorBuffer)
        } catch {
            return .failure(error)
        }
        wakeup.withLock { $0 = MultiHandle(pointer: multi) }
        defer { wakeup.withLock { $0 = nil } }
        let added = cresumable_curl_multi_add_handle(table, multi, easy)
        guard added == CRESUMABLE_CURLM_OK else {
            return .failure(ResumableError(.network, "curl_multi_add_handle: \(library.describeMulti(added))"))
        }
        defer { _ = cresumable_curl_multi_remove_handle(table, multi, easy) }
        let result = drive(multi, errorBuffer: errorBuffer)
        worker.finished = true
        return result
    }

    /// Performs the transfer until curl reports it done, the idle timeout passes, or it is cancelled.
    private func drive(
        _ multi: UnsafeMutableRawPointer,
        errorBuffer: UnsafeMutablePointer<CChar>
    ) -> Result<Void, ResumableError> {
        let table = library.table
        let idleTimeout = request.idleTimeout
        while true {
            if isCancelled { return .failure(Self.cancellation) }
            var running: Int32 = 0
            let performed = cresumable_curl_multi_perform(table, multi, &running)
            if performed != CRESUMABLE_CURLM_OK {
                worker.multiFailed = true
                return .failure(ResumableError(.network, "curl_multi_perform: \(library.describeMulti(performed))"))
            }
            var done: UnsafeMutableRawPointer?
            var code: Int32 = 0
            if cresumable_curl_multi_done(table, multi, &done, &code) != 0 {
                return outcome(code, detail: String(cString: errorBuffer), easy: done)
            }
            if isCancelled { return .failure(Self.cancellation) }
            // curl's own LOW_SPEED check averages over a window of seconds; this one is exact.
            let idle = ContinuousClock.now - worker.lastActivity
            if idle >= idleTimeout {
                return .failure(ResumableError(.timedOut, "the server sent nothing for \(idleTimeout)"))
            }
            // `idle < idleTimeout` here and `idle >= 0`, so the subtraction cannot overflow whatever the timeout.
            let wait = min(idleTimeout - idle, .seconds(1))
            _ = cresumable_curl_multi_poll(table, multi, Int32(clamping: wait.clampedMilliseconds + 1))
        }
    }

    private func finish(_ result: Result<Void, ResumableError>) {
        worker.finished = true
        let continuation = worker.continuation
        worker.continuation = nil
        continuation?.resume(returning: result)
    }

    // MARK: - Options

    /// Sets every option; returns the header list, which must outlive the transfer.
    private func configure(
        _ easy: UnsafeMutableRawPointer,
        route: ProxyRoute,
        errorBuffer: UnsafeMutablePointer<CChar>
    ) throws(ResumableError) -> UnsafeMutableRawPointer? {
        let table = library.table
        func set(_ option: Int32, _ value: Int, required: Bool = true) throws(ResumableError) {
            let code = cresumable_curl_easy_setopt_long(table, easy, option, value)
            if code != CRESUMABLE_CURLE_OK && required {
                throw ResumableError(.invalidRequest, "curl option \(option): \(library.describe(code))")
            }
        }
        func set(_ option: Int32, _ value: String) throws(ResumableError) {
            // curl copies string options.
            let code = cresumable_curl_easy_setopt_pointer(table, easy, option, value)
            if code != CRESUMABLE_CURLE_OK {
                throw ResumableError(.invalidRequest, "curl option \(option): \(library.describe(code))")
            }
        }
        func set(_ option: Int32, _ value: UnsafeMutableRawPointer) throws(ResumableError) {
            let code = cresumable_curl_easy_setopt_pointer(table, easy, option, value)
            if code != CRESUMABLE_CURLE_OK {
                throw ResumableError(.invalidRequest, "curl option \(option): \(library.describe(code))")
            }
        }
        let context = Unmanaged.passUnretained(self).toOpaque()
        try set(CRESUMABLE_CURLOPT_ERRORBUFFER, UnsafeMutableRawPointer(errorBuffer))
        try set(CRESUMABLE_CURLOPT_URL, request.url.absoluteString)
        // Only http and https, whatever a URL or the environment says.
        if cresumable_curl_easy_setopt_pointer(table, easy, CRESUMABLE_CURLOPT_PROTOCOLS_STR, "http,https")
            != CRESUMABLE_CURLE_OK
        {
            try set(CRESUMABLE_CURLOPT_PROTOCOLS, Int(CRESUMABLE_CURLPROTO_HTTP | CRESUMABLE_CURLPROTO_HTTPS))
        }
        try set(CRESUMABLE_CURLOPT_HTTPGET, 1)
        // HTTP/2 where TLS offers it, verification, trust, client certificate, pin: CurlTransport+TLS.swift.
        try CurlTransport.configureTLS(request.tls, on: easy, library: library)
        try set(CRESUMABLE_CURLOPT_FOLLOWLOCATION, 0)
        try set(CRESUMABLE_CURLOPT_NOSIGNAL, 1)
        try set(CRESUMABLE_CURLOPT_BUFFERSIZE, bufferSize)
        // Decode what a server encoded anyway; the explicit Accept-Encoding header below is what is sent.
        try set(CRESUMABLE_CURLOPT_ACCEPT_ENCODING, "")
        try set(CRESUMABLE_CURLOPT_HTTP_CONTENT_DECODING, 1)
        try set(CRESUMABLE_CURLOPT_SUPPRESS_CONNECT_HEADERS, 1, required: false)
        // Don't wait for a resolver thread when a transfer is abandoned (7.87 and later).
        try set(CRESUMABLE_CURLOPT_QUICK_EXIT, 1, required: false)
        // Name resolution, TCP, TLS and a proxy tunnel, together.
        try set(
            CRESUMABLE_CURLOPT_CONNECTTIMEOUT_MS,
            Int(clamping: CurlTransport.optionMilliseconds(request.connectTimeout)))
        let idleMilliseconds = CurlTransport.optionMilliseconds(request.idleTimeout)
        try set(CRESUMABLE_CURLOPT_LOW_SPEED_LIMIT, 1)
        try set(CRESUMABLE_CURLOPT_LOW_SPEED_TIME, Int(clamping: max((idleMilliseconds + 999) / 1000, 1)))
        try CurlTransport.applyProxy(route, to: easy, library: library)
        try set(CRESUMABLE_CURLOPT_WRITEDATA, context)
        try set(CRESUMABLE_CURLOPT_HEADERDATA, context)
        for (option, callback) in [
            (CRESUMABLE_CURLOPT_WRITEFUNCTION, curlWriteCallback),
            (CRESUMABLE_CURLOPT_HEADERFUNCTION, curlHeaderCallback),
        ] {
            let code = cresumable_curl_easy_setopt_callback(table, easy, option, callback)
            if code != CRESUMABLE_CURLE_OK {
                throw ResumableError(.invalidRequest, "curl option \(option): \(library.describe(code))")
            }
        }

        var list: UnsafeMutableRawPointer?
        func append(_ line: String) throws(ResumableError) {
            guard let appended = cresumable_curl_slist_append(table, list, line) else {
                throw ResumableError(.invalidRequest, "curl_slist_append failed")
            }
            list = appended
        }
        do throws(ResumableError) {
            for header in request.headers {
                // "Name:" would remove a header curl adds; "Name;" sends it with an empty value.
                try append(header.value.isEmpty ? "\(header.name);" : "\(header.name): \(header.value)")
            }
            if !request.headers.contains(where: { ResponseHead.sameName($0.name, "Accept") }) {
                try append("Accept:")
            }
            let code = cresumable_curl_easy_setopt_pointer(table, easy, CRESUMABLE_CURLOPT_HTTPHEADER, list)
            if code != CRESUMABLE_CURLE_OK {
                throw ResumableError(.invalidRequest, "curl option HTTPHEADER: \(library.describe(code))")
            }
        } catch {
            if let list { cresumable_curl_slist_free_all(table, list) }
            throw error
        }
        return list
    }

    // MARK: - Outcome

    private static let cancellation = ResumableError(.cancelled, "the request was cancelled")

    /// The result of a transfer curl reported done with `code`.
    private func outcome(_ code: Int32, detail: String, easy: UnsafeMutableRawPointer?)
        -> Result<Void, ResumableError>
    {
        if let consumerError = worker.consumerError { return .failure(consumerError) }
        if worker.declined { return .success(()) }
        if isCancelled { return .failure(Self.cancellation) }
        if let callbackError = worker.callbackError { return .failure(callbackError) }
        if code == CRESUMABLE_CURLE_OK { return worker.headDelivered ? .success(()) : .failure(noFinalResponse) }
        return .failure(classify(code, detail: detail, easy: easy))
    }

    /// Maps a curl result to the error the URLSession transport gives for the same failure (see
    /// ``TransportFailure``); `detail` is curl's error buffer, which names the host, port or reason at fault.
    private func classify(_ code: Int32, detail: String, easy: UnsafeMutableRawPointer?) -> ResumableError {
        let table = library.table
        var connectCode = 0
        var proxyError = 0
        var pretransfer: Int64 = 0
        if let easy {
            var long = 0
            if cresumable_curl_easy_getinfo_long(table, easy, CRESUMABLE_CURLINFO_HTTP_CONNECTCODE, &long)
                == CRESUMABLE_CURLE_OK
            {
                connectCode = long
            }
            if cresumable_curl_easy_getinfo_long(table, easy, CRESUMABLE_CURLINFO_PROXY_ERROR, &long)
                == CRESUMABLE_CURLE_OK
            {
                proxyError = long
            }
            var offset: Int64 = 0
            if cresumable_curl_easy_getinfo_off_t(table, easy, CRESUMABLE_CURLINFO_PRETRANSFER_TIME_T, &offset)
                == CRESUMABLE_CURLE_OK
            {
                pretransfer = offset
            }
        }
        let underlying = CurlError(code: code, description: library.describe(code))
        let context = TransportFailure.Context(request)
        let cause = TransportFailure.curl(
            code, detail: detail.isEmpty ? underlying.description : detail, connectCode: connectCode,
            proxyError: proxyError, connected: pretransfer > 0 || worker.headDelivered, context: context)
        return TransportFailure.error(
            cause, detail: detail.isEmpty ? underlying.description : detail, context: context, underlying: underlying)
    }

    // MARK: - Callbacks (on the transfer's thread, inside curl_multi_perform)

    fileprivate func receiveHeader(_ line: UnsafeRawBufferPointer) -> Bool {
        guard !worker.finished, !isCancelled else { return false }
        // Trailers of a chunked body come here too, after the head was delivered: ignore them, and they are no data
        // (a server that sends them forever, and never a byte of body, is idle).
        guard !worker.headDelivered else { return true }
        worker.lastActivity = .now
        switch worker.head.append(line) {
        case .incomplete:
            return true
        case .malformed(let reason):
            worker.callbackError = ResumableError(.protocolViolation, reason)
            return false
        case .complete(let head):
            worker.headDelivered = true
            let accepted = consumer.receive(head)
            worker.lastActivity = .now
            if !accepted { worker.declined = true }
            return accepted
        }
    }

    fileprivate func receiveBody(_ buffer: UnsafeRawBufferPointer) -> Bool {
        guard !worker.finished, !isCancelled else { return false }
        guard worker.headDelivered else {
            worker.callbackError = ResumableError(.protocolViolation, "body bytes arrived before the head")
            return false
        }
        do throws(ResumableError) {
            try consumer.receive(buffer)
        } catch {
            worker.consumerError = error
            return false
        }
        worker.lastActivity = .now
        return true
    }
}

/// A multi handle, shared with `cancel()` only for `curl_multi_wakeup`, which curl allows from any thread, and
/// kept by a ``CurlConnectionCache`` between the transfers that use it in turn.
struct MultiHandle: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer
}

/// What makes a connection usable for a request: the origin (scheme, host, port) and everything else that
/// configures the connection itself, the proxy (with its credentials, which authenticate a tunnel) and the whole TLS
/// configuration (trust, client certificate and key, pin).
///
/// A multi handle kept by a ``CurlConnectionCache`` only ever serves requests with one key, so its connection cache
/// never offers a request a connection set up differently: a connection verified against one trust, or
/// authenticated with one client certificate or proxy credentials, never carries a request configured with others.
/// curl compares most of these itself before reusing a connection (`ConnectionExists` in `lib/url.c`), but which
/// ones has changed from release to release (CVE-2021-22924, CVE-2022-27782, CVE-2023-27538); keying on all of them
/// does not depend on the libcurl loaded. Request headers, timeouts and the buffer size are per transfer, not per
/// connection, and are not part of the key.
struct CurlConnectionKey: Hashable, Sendable {
    var scheme: String
    var host: String
    var port: Int
    var proxy: ProxyAddress?
    var tls: DownloadTask.TLS

    init(_ request: TransportRequest, route: ProxyRoute) {
        (scheme, host, port) = HTTPURL.originParts(of: request.url)
        proxy = route.proxy
        tls = request.tls
    }
}

/// curl's connection caches for the requests of one session: idle multi handles (each owning its connections and
/// its DNS cache), kept by origin (``CurlConnectionKey``) and passed from each transfer to a later one.
///
/// A transfer takes the most recently used idle multi handle of its origin (or makes one when none is idle:
/// overlapping requests each get their own) and gives it back once its easy handle is removed and cleaned up, so no
/// two threads ever use one at once. Connections that ended cleanly stay open in it; curl closes a connection whose
/// transfer was aborted, and does not reuse one idle for longer than `CURLOPT_MAXAGE_CONN` (118 s by default). At
/// most ``idleLimit`` multi handles are kept; giving back one more cleans up the least recently used, closing its
/// connections. ``close()`` cancels the transfers still running and closes the idle connections.
///
/// The transport leaves `CURLOPT_FORBID_REUSE` and `CURLOPT_FRESH_CONNECT` at 0 and `CURLOPT_MAXAGE_CONN` at curl's
/// default, so a kept connection is reused whenever curl finds it alive.
final class CurlConnectionCache: Sendable {
    /// What ``take(for:origin:)`` found.
    fileprivate enum Taken {
        /// A multi handle a previous transfer to the same origin left; it is the taker's until given back.
        case idle(MultiHandle)
        /// None is idle for that origin: the taker makes its own.
        case empty
        /// The session was closed.
        case closed
    }

    /// The most idle multi handles a cache keeps by default: enough for a queue's transfers in flight, or a
    /// download's segment connections, to find theirs again.
    static let defaultIdleLimit = 16

    private struct State {
        /// The idle multi handles, least recently given back first.
        var idle: [(origin: CurlConnectionKey, handle: MultiHandle)] = []
        /// The transfers between ``take(for:origin:)`` and ``giveBack(_:origin:from:reusable:)``, for ``close()``
        /// to cancel.
        var running: [ObjectIdentifier: CurlTransfer] = [:]
        var closed = false
    }

    private let library: CurlLibrary
    /// The most idle multi handles kept, over all origins.
    let idleLimit: Int
    private let state = Mutex(State())

    init(library: CurlLibrary, idleLimit: Int = CurlConnectionCache.defaultIdleLimit) {
        self.library = library
        self.idleLimit = max(idleLimit, 0)
    }

    deinit {
        for idle in state.withLock({ $0.idle }) {
            _ = cresumable_curl_multi_cleanup(library.table, idle.handle.pointer)
        }
    }

    /// How many multi handles are idle now, for tests.
    var idleCount: Int { state.withLock { $0.idle.count } }

    /// Registers `transfer` as running and takes the most recently used idle multi handle of `origin`, if any.
    fileprivate func take(for transfer: CurlTransfer, origin: CurlConnectionKey) -> Taken {
        state.withLock { state in
            if state.closed { return .closed }
            state.running[ObjectIdentifier(transfer)] = transfer
            guard let index = state.idle.lastIndex(where: { $0.origin == origin }) else { return .empty }
            return .idle(state.idle.remove(at: index).handle)
        }
    }

    /// Ends `transfer`'s turn: keeps `multi` for a later transfer to `origin` when it is `reusable` and the cache is
    /// open, cleaning up the least recently used idle one beyond ``idleLimit``; otherwise cleans `multi` up.
    fileprivate func giveBack(
        _ multi: MultiHandle, origin: CurlConnectionKey, from transfer: CurlTransfer, reusable: Bool
    ) {
        let evicted = state.withLock { state -> [MultiHandle] in
            state.running[ObjectIdentifier(transfer)] = nil
            guard reusable, !state.closed, idleLimit > 0 else { return [multi] }
            state.idle.append((origin, multi))
            let excess = state.idle.count - idleLimit
            guard excess > 0 else { return [] }
            defer { state.idle.removeFirst(excess) }
            return state.idle.prefix(excess).map(\.handle)
        }
        for handle in evicted { _ = cresumable_curl_multi_cleanup(library.table, handle.pointer) }
    }

    /// Cancels the running transfers, cleans up the idle multi handles (closing their connections) and refuses every
    /// later ``take(for:origin:)``. Idempotent.
    func close() {
        let (idle, running) = state.withLock { state in
            state.closed = true
            defer { state.idle = [] }
            return (state.idle.map(\.handle), Array(state.running.values))
        }
        for transfer in running { transfer.cancel() }
        for handle in idle { _ = cresumable_curl_multi_cleanup(library.table, handle.pointer) }
    }
}

/// CURLOPT_WRITEFUNCTION: hands curl's buffer to the consumer. Returning any other count than the one given
/// makes curl abort with CURLE_WRITE_ERROR.
private let curlWriteCallback: cresumable_curl_data_callback = { buffer, size, count, context in
    let total = size * count
    guard let context else { return total == 0 ? 1 : 0 }
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(context).takeUnretainedValue()
    let accepted = transfer.receiveBody(UnsafeRawBufferPointer(start: buffer, count: total))
    return accepted ? total : (total == 0 ? 1 : 0)
}

/// CURLOPT_HEADERFUNCTION: one complete header line (with its CRLF) per call, for every response.
private let curlHeaderCallback: cresumable_curl_data_callback = { buffer, size, count, context in
    let total = size * count
    guard let context else { return total == 0 ? 1 : 0 }
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(context).takeUnretainedValue()
    let accepted = transfer.receiveHeader(UnsafeRawBufferPointer(start: buffer, count: total))
    return accepted ? total : (total == 0 ? 1 : 0)
}

/// A libcurl result code, kept as a failure's ``ResumableError/underlying``.
struct CurlError: Error, Sendable, CustomStringConvertible {
    /// The `CURLcode`.
    var code: Int32
    /// curl's sentence for it.
    var description: String
}

/// Collects the header lines curl passes for one response and builds its ``ResponseHead``.
///
/// Interim 1xx heads are skipped; a field folded onto the next line (obsolete line folding) is joined with a
/// space. Lines are UTF-8, or ISO-8859-1 when they are not valid UTF-8 (RFC 9110 §5.5 obs-text).
struct HeadCollector {
    enum Step {
        case incomplete
        case complete(ResponseHead)
        case malformed(String)
    }

    private var status: Int?
    private var fields: [HTTPHeader] = []

    mutating func append(_ raw: UnsafeRawBufferPointer) -> Step {
        var end = raw.count
        while end > 0, raw[end - 1] == UInt8(ascii: "\n") || raw[end - 1] == UInt8(ascii: "\r") { end -= 1 }
        let bytes = UnsafeRawBufferPointer(rebasing: raw[0..<end])
        let line = String(validating: bytes, as: UTF8.self) ?? String(bytes.map { Character(Unicode.Scalar($0)) })
        if line.hasPrefix("HTTP/") {
            // A new response: an interim one ended, or curl moved on.
            let parts = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
            guard parts.count >= 2, parts[1].count == 3, let code = Int(parts[1]), (100...999).contains(code) else {
                return .malformed("malformed status line \(line.debugDescription)")
            }
            status = code
            fields = []
            return .incomplete
        }
        guard let status else {
            return .malformed("a header line arrived before the status line")
        }
        if line.isEmpty {
            if (100...199).contains(status) && status != 101 {
                self.status = nil
                fields = []
                return .incomplete
            }
            return .complete(ResponseHead(status: status, headers: fields))
        }
        if let first = line.first, first == " " || first == "\t" {
            guard !fields.isEmpty else { return .malformed("a continuation line without a field") }
            let continued = Self.trimmingWhitespace(line[...])
            fields[fields.count - 1].value += fields[fields.count - 1].value.isEmpty ? continued : " " + continued
            return .incomplete
        }
        guard let colon = line.firstIndex(of: ":") else {
            return .malformed("malformed header line \(line.debugDescription)")
        }
        let name = Self.trimmingWhitespace(line[..<colon])
        let value = Self.trimmingWhitespace(line[line.index(after: colon)...])
        guard !name.isEmpty else { return .malformed("a header line without a name") }
        fields.append(HTTPHeader(name: name, value: value))
        return .incomplete
    }

    /// `text` without the optional whitespace HTTP allows around a field value (RFC 9110 §5.5): spaces and tabs only.
    /// Any other character, such as U+00A0 (a 0xA0 byte of an ISO-8859-1 line), is part of the value: trimming it
    /// could turn a malformed validator into another version's valid one.
    static func trimmingWhitespace(_ text: Substring) -> String {
        func isWhitespace(_ scalar: Unicode.Scalar) -> Bool {
            scalar == " " || scalar == "\t"
        }
        let scalars = text.unicodeScalars
        guard let first = scalars.firstIndex(where: { !isWhitespace($0) }),
            let last = scalars.lastIndex(where: { !isWhitespace($0) })
        else { return "" }
        return String(scalars[first...last])
    }
}

extension CurlTransport {
    /// The idle timeout as given to curl's own timeout options: whole milliseconds rounded up, at least 1 (0 would
    /// mean "no timeout" to curl) and at most 10^12 (about 31.7 years), for any `Duration`.
    ///
    /// The upper bound matters: curl multiplies `LOW_SPEED_TIME` by 1000 in a signed `long`, so a timeout near
    /// `Int64.max` milliseconds would wrap there. A longer timeout is still enforced exactly by the transfer loop.
    static func optionMilliseconds(_ idleTimeout: Duration) -> Int64 {
        min(max(idleTimeout.clampedMilliseconds, 1), 1_000_000_000_000)
    }
}

extension Duration {
    /// The duration in whole milliseconds, rounded up, clamped to `0...Int64.max`: a negative duration is 0 and
    /// one beyond `Int64.max` milliseconds is `Int64.max`.
    ///
    /// Any `Duration` converts without trapping: a configuration may hold `.seconds(Int64.max)` (or more), where
    /// `seconds * 1000` overflows and `components` itself traps beyond `Int64.max` seconds.
    var clampedMilliseconds: Int64 {
        guard self > .zero else { return 0 }
        guard self < .milliseconds(Int64.max) else { return .max }
        // Below Int64.max ms the seconds are below 2^63 / 1000 and the rounded-up sum is at most Int64.max.
        let (seconds, attoseconds) = components
        return seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
    }
}
