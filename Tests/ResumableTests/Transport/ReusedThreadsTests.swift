import Dispatch
import Foundation
import Testing

@testable import Resumable

@Suite("Reused threads and header lookups of the transfer path")
struct ReusedThreadsTests {
    /// Signals a semaphore when released.
    final class Releasing: Sendable {
        let released: DispatchSemaphore
        init(_ released: DispatchSemaphore) { self.released = released }
        deinit { released.signal() }
    }

    @Test("Work waiting for later work never waits for a thread: each gets one, idle or new")
    func neverWaitsForAThread() {
        let threads = ReusedThreads(name: "test.reused")
        let count = 8
        let gates = (0..<count).map { _ in DispatchSemaphore(value: 0) }
        let done = DispatchSemaphore(value: 0)
        // Work i waits for work i + 1: with fewer threads than pieces of work, the first never ends.
        for index in 0..<count {
            threads.run {
                if index + 1 < count { _ = gates[index + 1].wait(timeout: .now() + 30) }
                gates[index].signal()
                done.signal()
            }
        }
        for _ in 0..<count { #expect(done.wait(timeout: .now() + 30) == .success) }
        #expect(gates[0].wait(timeout: .now() + 1) == .success)
    }

    @Test("A thread keeps nothing of its work once it ended, though it waits for more")
    func releasesCaptures() {
        let threads = ReusedThreads(name: "test.reused")
        for _ in 0..<3 {
            let released = DispatchSemaphore(value: 0)
            let ran = DispatchSemaphore(value: 0)
            do {
                let captured = Releasing(released)
                threads.run {
                    withExtendedLifetime(captured) {}
                    ran.signal()
                }
            }
            #expect(ran.wait(timeout: .now() + 30) == .success)
            // Well within the idle timeout: a waiting thread that held the work would release it only when ending.
            #expect(released.wait(timeout: .now() + .milliseconds(2_000)) == .success)
        }
        #expect(ReusedThreads.idleTimeout == .seconds(5))
    }

    @Test("Header names match ignoring ASCII case only; values lose spaces and tabs at both ends, never U+00A0")
    func headerNames() {
        var collector = HeadCollector()
        func feed(_ line: String) -> HeadCollector.Step {
            Array(line.utf8).withUnsafeBytes { collector.append($0) }
        }
        for line in [
            "HTTP/1.1 200 OK\r\n", "content-LENGTH: \t 42 \r\n", "X-Note:\u{A0}a b\u{A0}\t\r\n", "X-Other: \ta b \r\n",
        ] {
            _ = feed(line)
        }
        guard case .complete(let head) = feed("\r\n") else {
            return #expect(Bool(false), "the head did not complete")
        }
        #expect(head.value("Content-Length") == "42")
        // RFC 9110 §5.5: only SP and HTAB are optional whitespace; a no-break space is part of the value.
        #expect(head.value("x-note") == "\u{A0}a b\u{A0}")
        #expect(head.value("x-other") == "a b")
        #expect(head.values("CONTENT-length") == ["42"])
        #expect(!ResponseHead.sameName("Content-Lengt\u{212A}", "Content-Lengtk"))
        #expect(!ResponseHead.sameName("ETag", "ETags"))
        #expect(ResponseHead.sameName("", ""))
    }
}
