import Foundation

#if canImport(Glibc)
    import Glibc
#endif

extension DownloadEngine {
    /// Feeds responses from the transport into the state machine and the file.
    struct Consumer: ResponseConsumer {
        let engine: DownloadEngine

        func receive(_ head: ResponseHead) -> Bool {
            engine.receive(head)
        }

        func receive(_ body: UnsafeRawBufferPointer) throws(ResumableError) {
            try engine.receive(body)
        }
    }

    /// Judges a head through the machine and performs its action; `false` stops the request unread.
    private func receive(_ head: ResponseHead) -> Bool {
        let decided = state.withLock { (state) -> (ResumeStateMachine, ResumeStateMachine.BodyPlan)? in
            guard state.stop == nil, !state.ended else { return nil }
            let before = state.machine
            switch state.machine.receive(head) {
            case .skipBody(let outcome):
                state.headOutcome = outcome
                return nil
            case .writeBody(let plan):
                return (before, plan)
            }
        }
        guard let (before, plan) = decided else { return false }
        if let reason = plan.newFile {
            do throws(ResumableError) {
                try switchFile(reason, restoring: before)
            } catch {
                state.withLock { $0.headOutcome = .fail(error) }
                return false
            }
        }
        let (token, file) = state.withLock { state in
            state.progress.transferStart = plan.offset
            return (state.machine.state.token(), state.file)
        }
        events.send(plan.event)
        emitProgress()
        // A hand-off before the first byte is still a hand-off: record the accepted response at once.
        checkpoints.schedule(token, file: file)
        return true
    }

    /// Writes a piece of an accepted body at the offset the machine gives it.
    private func receive(_ body: UnsafeRawBufferPointer) throws(ResumableError) {
        let count = body.count
        let (emit, checkpoint) = try state.withLock { (state) throws(ResumableError) -> (Bool, ResumeToken?) in
            guard state.stop == nil, !state.ended else {
                throw ResumableError(.cancelled, "the download was cancelled")
            }
            // A token that could not be written stops the download: it never continues unrecorded.
            if let failure = checkpoints.failure { throw failure }
            let position = try state.machine.receiveBody(count: count)
            do throws(ResumableError) {
                try state.file.write(body, at: position)
            } catch {
                state.machine.revertBody(to: position)
                throw error
            }
            let offset = state.machine.state.offset
            if offset - state.writebackStart >= Self.writebackChunk {
                let (start, file) = (state.writebackStart, state.file)
                state.writebackStart = offset
                writebackQueue.async { file.startWriteback(offset: start, count: offset - start) }
            }
            let emit = state.progress.add(count)
            let checkpoint = checkpoints.claimPeriodic() ? state.machine.state.token() : nil
            return (emit, checkpoint)
        }
        if emit { emitProgress() }
        if let checkpoint { checkpoints.schedule(checkpoint, file: state.withLock { $0.file }) }
        if let rate = configuration.simulatedWriterBytesPerSecond, rate > 0 {
            usleep(useconds_t(min(Double(count) / Double(rate) * 1e6, 1e6)))
        }
    }

    func emitProgress() {
        let progress = state.withLock { state in
            state.progress.report(
                bytesOnDisk: state.machine.state.offset, expectedLength: state.machine.state.expectedLength)
        }
        events.send(.progress(progress))
    }
}
