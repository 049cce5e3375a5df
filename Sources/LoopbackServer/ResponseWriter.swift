#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Writes one response on a connection, applying throttling, dropping and chunked framing to the body.
///
/// Used by a single connection thread.
final class ResponseWriter {
    /// How writing ended.
    enum Outcome {
        /// Everything was sent.
        case completed
        /// The body was cut on purpose (drop limit reached).
        case dropped
        /// The peer went away, the content ended early or the server is stopping.
        case failed
    }

    /// The unthrottled write size.
    static let chunkSize = 256 * 1024

    private let descriptor: Int32
    private let plan: ResponsePlan
    private let source: ContentSource?
    private let isStopping: @Sendable () -> Bool
    private let scratch: UnsafeMutableRawBufferPointer
    private var bodyBytesSent: Int64 = 0
    private var crc = CRC32()
    private var paceStart: ContinuousClock.Instant?

    init(
        descriptor: Int32,
        plan: ResponsePlan,
        source: ContentSource?,
        scratch: UnsafeMutableRawBufferPointer,
        isStopping: @escaping @Sendable () -> Bool
    ) {
        self.descriptor = descriptor
        self.plan = plan
        self.source = source
        self.scratch = scratch
        self.isStopping = isStopping
    }

    /// Sends the interim responses, the head and (unless excluded) the body.
    func write() -> Outcome {
        for interim in plan.interim {
            guard SocketIO.sendAll(descriptor, interim.bytes) else { return .failed }
        }
        guard SocketIO.sendAll(descriptor, plan.headBytes) else { return .failed }
        guard plan.includesBody else { return .completed }
        for part in plan.parts {
            let outcome = write(part)
            if outcome != .completed { return outcome }
        }
        if plan.chunked {
            guard SocketIO.sendAll(descriptor, Array("0\r\n\r\n".utf8)) else { return .failed }
        }
        return .completed
    }

    private func write(_ part: ResponsePlan.BodyPart) -> Outcome {
        switch part {
        case .literal(let bytes):
            return bytes.withUnsafeBytes { writeBody($0) }
        case .content(let range):
            return writeContent(range, updatingCRC: false)
        case .storedDeflate(let range):
            let length = Int64(range.count)
            let blocks = GzipFraming.blockCount(for: length)
            var position = range.lowerBound
            for block in 0..<blocks {
                let blockLength = Int(min(GzipFraming.maxBlockLength, range.upperBound - position))
                let header = GzipFraming.blockHeader(length: blockLength, isFinal: block == blocks - 1)
                let outcome = header.withUnsafeBytes { writeBody($0) }
                guard outcome == .completed else { return outcome }
                let contentOutcome = writeContent(position..<position + Int64(blockLength), updatingCRC: true)
                guard contentOutcome == .completed else { return contentOutcome }
                position += Int64(blockLength)
            }
            return .completed
        case .gzipTrailer(let length):
            return GzipFraming.trailer(crc: crc.value, length: length).withUnsafeBytes { writeBody($0) }
        }
    }

    private func writeContent(_ range: Range<Int64>, updatingCRC: Bool) -> Outcome {
        guard let source else { return range.isEmpty ? .completed : .failed }
        var position = range.lowerBound
        while position < range.upperBound {
            let wanted = Int(min(Int64(scratch.count), range.upperBound - position))
            let filled = source.read(at: position, into: UnsafeMutableRawBufferPointer(rebasing: scratch[0..<wanted]))
            guard filled > 0 else { return .failed }
            let chunk = UnsafeRawBufferPointer(rebasing: scratch[0..<filled])
            if updatingCRC { crc.update(chunk) }
            let outcome = writeBody(chunk)
            guard outcome == .completed else { return outcome }
            position += Int64(filled)
        }
        return .completed
    }

    /// Sends body bytes, honouring the drop limit, pacing and chunked framing.
    private func writeBody(_ buffer: UnsafeRawBufferPointer) -> Outcome {
        var data = buffer
        var dropsAfterThis = false
        if let limit = plan.dropAfterBytes {
            let remaining = limit - bodyBytesSent
            if remaining <= 0 && !data.isEmpty { return .dropped }
            if Int64(data.count) > remaining {
                data = UnsafeRawBufferPointer(rebasing: data[0..<Int(max(0, remaining))])
                dropsAfterThis = true
            }
        }
        let pieceSize = pacingChunkSize
        var offset = 0
        while offset < data.count {
            if isStopping() { return .failed }
            var length = min(pieceSize, data.count - offset)
            if let gate = plan.gate {
                guard let room = hold(at: gate) else { return .failed }
                length = Int(min(Int64(length), room))
            }
            let piece = UnsafeRawBufferPointer(rebasing: data[offset..<offset + length])
            guard sendPiece(piece) else { return .failed }
            offset += length
            bodyBytesSent += Int64(length)
            guard pace() else { return .failed }
        }
        return dropsAfterThis ? .dropped : .completed
    }

    /// Waits while `gate` lets no more bytes through; returns how many may be sent now (more than 0), or `nil`
    /// when the client closed the connection or the server is stopping.
    private func hold(at gate: BodyGate) -> Int64? {
        var held = false
        let clock = ContinuousClock()
        let arrival = clock.now
        defer {
            if held {
                gate.leave()
                // The pacing schedule resumes where it stopped: time at the gate is not made up in a burst.
                paceStart = paceStart.map { $0 + (clock.now - arrival) }
            }
        }
        while true {
            guard let room = gate.room(after: bodyBytesSent) else { return .max }
            if room > 0 { return room }
            if !held {
                gate.arrive()
                held = true
            }
            if isStopping() || peerClosed(waitingMilliseconds: 10) { return nil }
        }
    }

    /// Waits up to `milliseconds` for the client to close the connection; returns whether it did (bytes it sent
    /// meanwhile, such as a pipelined request, are left unread).
    private func peerClosed(waitingMilliseconds milliseconds: Int32) -> Bool {
        var descriptors = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
        let ready = poll(&descriptors, 1, milliseconds)
        guard ready > 0 else { return false }
        if descriptors[0].revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 { return true }
        var byte: UInt8 = 0
        let peeked = recv(descriptor, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        if peeked == 0 { return true }
        if peeked < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR { return true }
        // Unread request bytes keep the socket readable: wait without polling it.
        usleep(UInt32(milliseconds) * 1000)
        return false
    }

    private var pacingChunkSize: Int {
        guard let rate = plan.throttleBytesPerSecond, rate > 0 else { return Self.chunkSize }
        return max(1, min(64 * 1024, rate / 20))
    }

    private func sendPiece(_ piece: UnsafeRawBufferPointer) -> Bool {
        guard plan.chunked else { return SocketIO.sendAll(descriptor, piece) }
        let header = Array("\(String(piece.count, radix: 16))\r\n".utf8)
        return SocketIO.sendAll(descriptor, header) && SocketIO.sendAll(descriptor, piece)
            && SocketIO.sendAll(descriptor, [0x0D, 0x0A])
    }

    /// Sleeps until the body is back on schedule; returns `false` when the server is stopping.
    private func pace() -> Bool {
        guard let rate = plan.throttleBytesPerSecond, rate > 0 else { return true }
        let clock = ContinuousClock()
        let start = paceStart ?? clock.now
        if paceStart == nil {
            // The first piece goes out immediately; the schedule starts with it.
            paceStart = start
        }
        let due = start + .nanoseconds(Int64(Double(bodyBytesSent) / Double(rate) * 1_000_000_000))
        while clock.now < due {
            if isStopping() { return false }
            let wait = min(due - clock.now, .milliseconds(50))
            let (seconds, attoseconds) = wait.components
            var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
            _ = nanosleep(&request, nil)
        }
        return true
    }
}
