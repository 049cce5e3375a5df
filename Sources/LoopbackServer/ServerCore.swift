import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The engine behind ``LoopbackServer``: the listening socket, the accept thread, connection threads and state.
///
/// Separate from the public class so that the threads keep only the core alive, and the public object's deinit can
/// shut everything down.
final class ServerCore: Sendable {
    /// A one-shot action queued for a path.
    enum QueuedAction: Sendable {
        /// Send this raw response.
        case scripted(ScriptedResponse)
        /// Serve the resource with this behavior.
        case behavior(Behavior)
    }

    /// The mutable state, guarded by ``state``.
    struct State: Sendable {
        var resources: [String: Resource] = [:]
        var queues: [String: [QueuedAction]] = [:]
        /// One-shot actions for the request to a path whose single range starts at a given byte (FIFO per start).
        var rangeQueues: [String: [Int64: [QueuedAction]]] = [:]
        /// Per path (the key a resource is registered under, else the raw request path): the requests in flight
        /// now, the most ever in flight at once, and how many requests were turned away by a concurrency limit.
        var concurrency: [String: ConcurrencyCounters] = [:]
        var requests: [RecordedRequest] = []
        var staticRoot: URL?
        var connections: Set<Int32> = []
        /// How many connections were accepted: the last one's number (see ``RecordedRequest/connection``).
        var connectionCount = 0
        var shutdownStarted = false
    }

    /// The concurrency counters of one path (see ``ConcurrencyLimit``).
    struct ConcurrencyCounters: Sendable {
        var inFlight = 0
        var peak = 0
        var overloads = 0
    }

    /// The most connections served at once; further connections are closed immediately.
    static let maxConnections = 512

    let configuration: LoopbackServer.Configuration
    let listener: Listener
    let state = Mutex(State())
    private let stopping = Atomic<Bool>(false)
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let acceptGroup = DispatchGroup()
    private let connectionGroup = DispatchGroup()

    /// Binds and listens; does not start accepting yet (see ``start()``).
    init(configuration: LoopbackServer.Configuration) throws(LoopbackServerError) {
        self.configuration = configuration
        listener = try Listener.open(host: configuration.host, port: configuration.port)
        var descriptors: [Int32] = [-1, -1]
        guard pipe(&descriptors) == 0 else {
            let message = SocketIO.errorDescription()
            close(listener.descriptor)
            throw LoopbackServerError("pipe() failed: \(message)")
        }
        for descriptor in descriptors {
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        }
        wakeRead = descriptors[0]
        wakeWrite = descriptors[1]
    }

    /// Whether ``shutdown()`` has begun.
    var isStopping: Bool { stopping.load(ordering: .acquiring) }

    /// Starts the accept thread.
    func start() {
        acceptGroup.enter()
        let thread = Thread { [self] in
            acceptLoop()
            acceptGroup.leave()
        }
        thread.name = "LoopbackServer.accept"
        thread.start()
    }

    /// Stops accepting, wakes and closes every connection and waits for all threads; idempotent.
    func shutdown() {
        let first = state.withLock { state in
            defer { state.shutdownStarted = true }
            return !state.shutdownStarted
        }
        guard first else {
            acceptGroup.wait()
            connectionGroup.wait()
            return
        }
        stopping.store(true, ordering: .releasing)
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
        acceptGroup.wait()
        close(listener.descriptor)
        state.withLock { state in
            for descriptor in state.connections {
                SocketIO.shutdownBoth(descriptor)
            }
        }
        connectionGroup.wait()
        close(wakeRead)
        close(wakeWrite)
    }

    private func acceptLoop() {
        while !isStopping {
            var descriptors = [
                pollfd(fd: listener.descriptor, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&descriptors, 2, -1)
            if ready < 0 {
                if errno == EINTR { continue }
                return
            }
            if isStopping || descriptors[1].revents != 0 { return }
            guard descriptors[0].revents & Int16(POLLIN) != 0 else { continue }
            let connection = accept(listener.descriptor, nil, nil)
            if connection < 0 {
                if errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM {
                    usleep(10_000)
                }
                continue
            }
            let number = state.withLock { state -> Int? in
                guard !state.shutdownStarted, state.connections.count < Self.maxConnections else { return nil }
                state.connections.insert(connection)
                state.connectionCount += 1
                return state.connectionCount
            }
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            _ = fcntl(connection, F_SETFL, fcntl(connection, F_GETFL) & ~O_NONBLOCK)
            guard let number else {
                close(connection)
                continue
            }
            connectionGroup.enter()
            let thread = Thread { [self] in
                serve(connection: connection, number: number)
                connectionGroup.leave()
            }
            thread.name = "LoopbackServer.connection"
            thread.start()
        }
    }

    /// Unregisters and closes a connection, resetting it or closing gracefully (FIN, then draining the peer).
    func finish(connection descriptor: Int32, reset: Bool) {
        if reset {
            SocketIO.armReset(descriptor)
        } else {
            SocketIO.shutdownWrite(descriptor)
            drain(descriptor)
        }
        state.withLock { state in
            state.connections.remove(descriptor)
            close(descriptor)
        }
    }

    /// Reads and discards until the peer closes (at most about two seconds), so closing never resets unread data.
    private func drain(_ descriptor: Int32) {
        SocketIO.setReceiveTimeout(descriptor, milliseconds: 250)
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(2)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while clock.now < deadline && !isStopping {
            let received = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if received > 0 { continue }
            if received < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) { continue }
            return
        }
    }
}
