import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// How many of a `URLSession`'s delegate callbacks may wait for the consumer before the session stops reading.
///
/// swift-corelibs-foundation (Linux) reads the socket on its own and queues every chunk it reads, at most 16 KiB
/// (curl's `CURL_MAX_WRITE_SIZE`), as one operation on the session's delegate queue: unbounded, that queue grows
/// with the gap between the network and the writer. ``URLSessionDeliveryQueue`` bounds it.
///
/// The session stops reading when the socket event that reached the high-water mark ends, and curl reads up to
/// about 100 times per socket event: so at most `highWater + 101` callbacks wait, with the defaults 165 of at most
/// 16 KiB (2.6 MiB) per download, and usually far fewer.
struct URLSessionFlowControl: Hashable, Sendable {
    /// Callbacks waiting at which the session stops reading: 64, 1 MiB of body.
    var highWater = 64
    /// Callbacks waiting at which it reads again. Between the two marks the session runs freely, so it is stopped
    /// and started once per `highWater - lowWater` chunks (768 KiB with the defaults), not once per chunk.
    var lowWater = 16

    static let `default` = URLSessionFlowControl()
}

/// What a ``URLSessionDeliveryQueue`` did: for tests and benchmarks.
struct URLSessionDeliveryStatistics: Hashable, Sendable {
    /// Callbacks queued and not yet finished.
    var waiting = 0
    /// The most callbacks that were ever waiting at once.
    var peakWaiting = 0
    /// How many times the session was stopped at the high-water mark.
    var holds = 0
}

#if canImport(FoundationNetworking)
    import Synchronization

    /// The delegate queue of one `URLSession` of the URLSession transport: serial, and bounded.
    ///
    /// swift-corelibs-foundation cannot pause receiving: `URLSessionTask.suspend()` removes the curl easy handle from
    /// the multi handle, which aborts the transfer and closes the connection, and `resume()` adds it again, which
    /// sends the request again from the start (FoundationNetworking's `NativeProtocol.suspend()` and `resume()`;
    /// measured: the delegate then receives a second `200` and the body again from byte 0).
    ///
    /// A session's curl multi handle runs on a serial `DispatchQueue` of its own, its isolation queue: the socket and
    /// timer sources fire there, curl's write callback runs there, and hands each chunk to the delegate queue through
    /// `OperationQueue.addOperation(_:)`. When ``URLSessionFlowControl/highWater`` callbacks are waiting, this queue
    /// suspends that isolation queue (`DispatchQueue.suspend()`, which takes effect when its running block returns,
    /// normally the very one calling `addOperation`) and resumes it once no more than
    /// ``URLSessionFlowControl/lowWater`` are: meanwhile curl reads nothing from the socket, the kernel's socket
    /// buffers fill, and TCP holds the server back — the backpressure the libcurl transport gets from its
    /// synchronous write callback. What waits is at most the high-water mark plus what one socket event delivers (see
    /// ``URLSessionFlowControl``).
    ///
    /// The callbacks run on a serial dispatch queue of this queue's own (``callbacks``), not on the concurrent queue
    /// an `OperationQueue` makes for itself on Linux. That one runs on the global default-QoS thread pool, which on
    /// Linux is also Swift concurrency's global executor and which adds no thread while as many as there are cores
    /// run: there, a consumer that blocks (writes, waits for a rate limiter) would take a thread from every task,
    /// and busy tasks would keep a response head from its consumer for as long as they ran: on a loaded machine,
    /// long enough for the connect timeout to fail the request. A serial queue runs on libdispatch's overcommit pool, which
    /// gives it a thread whenever it has work: the consumer is called on a thread of its own, as with libcurl.
    ///
    /// Nothing is blocked. Other sessions go on: all of them share one serial work queue, which a blocked thread
    /// would stop. The session's own work queue goes on too: a task can be made, cancelled or resumed (its
    /// `workQueue.sync` calls never wait for the isolation queue), and cancelling a task removes its easy handle at
    /// once. The idle timeout (the easy handle's timer, on the task's queue) keeps running, as with libcurl: a
    /// consumer that takes longer than it to finish the callbacks between the marks fails the request with a timeout.
    ///
    /// The isolation queue is FoundationNetworking's internal `URLSession.multiHandle.queue`, found with `Mirror`
    /// (``attach(to:)``). Should a later FoundationNetworking rename it, the queue is not bounded (as before this
    /// existed) and `URLSessionFlowControlTests` fail. ``release()`` resumes it for good before the session is
    /// invalidated: a suspended dispatch queue must not be deallocated.
    final class URLSessionDeliveryQueue: OperationQueue, @unchecked Sendable {
        // @unchecked: the mutable state is in `state`; OperationQueue itself is thread-safe.
        private struct State {
            var statistics = URLSessionDeliveryStatistics()
            /// The session's curl isolation queue, which this suspends and resumes.
            var isolationQueue: DispatchQueue?
            var suspended = false
            var released = false
        }

        private let limits: URLSessionFlowControl
        private let state = Mutex(State())
        /// The serial queue the callbacks run on (see the type's notes); held here because `underlyingQueue` does
        /// not retain it.
        let callbacks = DispatchQueue(label: "Resumable URLSession delivery")

        init(limits: URLSessionFlowControl) {
            self.limits = limits
            super.init()
            maxConcurrentOperationCount = 1
            name = "Resumable URLSession delivery"
            underlyingQueue = callbacks
        }

        /// What the queue did so far.
        var currentStatistics: URLSessionDeliveryStatistics {
            state.withLock { $0.statistics }
        }

        /// Starts bounding the delegate callbacks of `session`, whose delegate queue this is; returns whether its
        /// curl isolation queue was found.
        @discardableResult
        func attach(to session: URLSession) -> Bool {
            let isolationQueue = Self.isolationQueue(of: session)
            state.withLock { $0.isolationQueue = isolationQueue }
            return isolationQueue != nil
        }

        /// Stops bounding the queue for good and resumes the session's isolation queue: the session is being
        /// invalidated.
        func release() {
            state.withLock { state in
                state.released = true
                if state.suspended {
                    state.suspended = false
                    state.isolationQueue?.resume()
                }
            }
        }

        override func addOperation(_ block: @escaping @Sendable () -> Void) {
            // Suspending and resuming under the lock keeps them balanced (resuming a queue that is not suspended
            // traps); neither waits. A suspension takes effect when the isolation queue's running block returns:
            // normally the one calling this.
            state.withLock { state in
                state.statistics.waiting += 1
                state.statistics.peakWaiting = max(state.statistics.peakWaiting, state.statistics.waiting)
                if !state.released, !state.suspended, state.statistics.waiting >= limits.highWater,
                    let isolationQueue = state.isolationQueue
                {
                    state.suspended = true
                    state.statistics.holds += 1
                    isolationQueue.suspend()
                }
            }
            super.addOperation { [self] in
                block()
                operationFinished()
            }
        }

        private func operationFinished() {
            state.withLock { state in
                state.statistics.waiting -= 1
                if state.suspended, state.statistics.waiting <= limits.lowWater {
                    state.suspended = false
                    state.isolationQueue?.resume()
                }
            }
        }

        /// FoundationNetworking's `URLSession.multiHandle.queue`, or `nil` when there is none by those names.
        private static func isolationQueue(of session: URLSession) -> DispatchQueue? {
            guard let multiHandle = child("multiHandle", of: session) else { return nil }
            return child("queue", of: multiHandle) as? DispatchQueue
        }

        /// The stored property `label` of `value` or of one of its superclasses.
        private static func child(_ label: String, of value: Any) -> Any? {
            var mirror: Mirror? = Mirror(reflecting: value)
            while let current = mirror {
                if let child = current.children.first(where: { $0.label == label }) { return child.value }
                mirror = current.superclassMirror
            }
            return nil
        }
    }
#endif
