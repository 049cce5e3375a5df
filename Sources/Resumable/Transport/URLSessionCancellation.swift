import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Cancels the data tasks of one `URLSession` so that a cancel that meets a task's completion cannot trap the process.
///
/// swift-corelibs-foundation's `URLSessionTask.cancel()` runs a block on the session's work queue that marks the task
/// cancelling and then queues the report of its failure, a second block, on the same queue. That report looks the task
/// up in the session's registry and traps when it is not there ("Trying to access a behaviour for a task that in not
/// in the registry"). A task leaves the registry when its completion, which runs on the delegate queue, has called
/// `urlSession(_:task:didCompleteWithError:)`: it then marks the task completed and queues the removal on the work
/// queue. When that completion runs between the first block's check and its queueing of the report, the removal
/// comes first, and the report traps. Measured: cancelling requests the moment their last byte arrives trapped a test
/// process within 1,500 requests; and `URLSession.invalidateAndCancel()` reads the registry off the work queue, which
/// crashed in a fault soak.
///
/// The fence orders the two. Every cancel is counted in ``pending`` before `cancel()` is called and uncounted by a
/// block queued on the work queue right after it, so the count drops only once the cancel's first block has run and
/// queued its report. The delegate's completion callback (``willComplete(_:)``) first marks its task as completing,
/// under the lock the count is taken under, and then waits for the count to drop: the removal is queued after every
/// report of a cancel asked for before it, and no cancel of that task is asked for after it. The wait is for the work
/// queue alone, which never waits for the delegate queue.
///
/// The work queue is FoundationNetworking's internal `URLSession.workQueue`, found with `Mirror` (as
/// ``URLSessionDeliveryQueue`` finds the curl queue). Without it (another FoundationNetworking, Apple platforms), a
/// cancel is a plain `cancel()`.
final class URLSessionCancellation: Sendable {
    private struct State {
        var workQueue: DispatchQueue?
        /// Tasks whose completion has begun: never cancelled again. Pruned of completed ones as it grows.
        var completing: [Int: URLSessionTask] = [:]
        var pruneAt = 64
    }

    private let state = Mutex(State())
    /// Entered for each cancel, left on the work queue after it.
    private let pending = DispatchGroup()

    /// Finds the work queue of `session`, the only session whose tasks this cancels; returns whether it did.
    @discardableResult
    func attach(to session: URLSession) -> Bool {
        #if canImport(FoundationNetworking)
            let workQueue = Self.workQueue(of: session)
        #else
            let workQueue: DispatchQueue? = nil
        #endif
        state.withLock { $0.workQueue = workQueue }
        return workQueue != nil
    }

    /// Cancels `task` unless its completion has begun (then it ends by itself).
    func cancel(_ task: URLSessionTask) {
        let workQueue = state.withLock { state -> DispatchQueue?? in
            guard state.completing[task.taskIdentifier] == nil else { return .none }
            pending.enter()
            return .some(state.workQueue)
        }
        guard case .some(let workQueue) = workQueue else { return }
        task.cancel()
        let group = pending
        if let workQueue {
            workQueue.async { group.leave() }
        } else {
            group.leave()
        }
    }

    /// Called by the delegate's completion callback before anything else: from now on `task` is not cancelled, and
    /// this returns when every cancel asked for so far has queued its report on the work queue.
    func willComplete(_ task: URLSessionTask) {
        state.withLock { state in
            state.completing[task.taskIdentifier] = task
            if state.completing.count >= state.pruneAt {
                state.completing = state.completing.filter { $0.value.state != .completed }
                state.pruneAt = max(64, state.completing.count * 2)
            }
        }
        pending.wait()
    }

    #if canImport(FoundationNetworking)
        /// FoundationNetworking's `URLSession.workQueue`, or `nil` when there is none by that name.
        private static func workQueue(of session: URLSession) -> DispatchQueue? {
            var mirror: Mirror? = Mirror(reflecting: session)
            while let current = mirror {
                if let child = current.children.first(where: { $0.label == "workQueue" }) {
                    return child.value as? DispatchQueue
                }
                mirror = current.superclassMirror
            }
            return nil
        }
    #endif
}
