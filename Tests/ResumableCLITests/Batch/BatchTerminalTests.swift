import CProcessSpawning
import Foundation
import LoopbackServer
import ProcessSpawning
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A pseudo-terminal of a given size: the built `resumable` writes its standard error to the terminal side, the
/// test reads what it drew from the other.
private final class PseudoTerminal: Sendable {
    let primary: Int32
    let secondaryPath: String
    private let output = Mutex(Data())

    init(columns: UInt16, rows: UInt16) throws {
        var name = [CChar](repeating: 0, count: 256)
        let primary = resumable_open_pseudo_terminal(&name, UInt(name.count))
        guard primary >= 0 else { throw CocoaError(.fileReadUnknown) }
        var size = winsize(ws_row: rows, ws_col: columns, ws_xpixel: 0, ws_ypixel: 0)
        #if canImport(Glibc)
            let request = UInt(TIOCSWINSZ)
        #else
            let request = TIOCSWINSZ
        #endif
        guard ioctl(primary, request, &size) == 0 else { throw CocoaError(.fileReadUnknown) }
        self.primary = primary
        secondaryPath = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(primary, $0.baseAddress, $0.count) }
                if count < 0, errno == EINTR { continue }
                // EIO once no process has the terminal side open any more.
                guard count > 0 else { break }
                self.output.withLock { $0.append(contentsOf: buffer[0..<count]) }
            }
        }
        thread.name = "PseudoTerminal.reader"
        thread.start()
    }

    /// Everything drawn so far.
    var text: String { output.withLock { String(decoding: $0, as: UTF8.self) } }
}

@Suite("Batches on a terminal")
struct BatchTerminalTests {
    @Test("On a terminal six rows high, eight active downloads draw three lines, '… and 5 more' and the total")
    func displayFitsTheTerminalHeight() async throws {
        let server = try LoopbackServer()
        defer { server.shutdown() }
        let scratch = try ScratchDirectory()
        let gate = BodyGate(holdingAfter: 64 << 10)
        defer { gate.open() }
        var list = ""
        for index in 0..<8 {
            server.register(.bytes(Resource.generatedBytes(seed: 20, range: 0..<(1 << 20))), at: "/t\(index).bin")
            server.enqueue(behavior: Behavior(gate: gate), for: "/t\(index).bin")
            list += server.url(for: "/t\(index).bin").absoluteString + "\n"
        }
        try Data(list.utf8).write(to: scratch.file("list.txt"))
        let terminal = try PseudoTerminal(columns: 100, rows: 6)
        defer { close(terminal.primary) }
        let secondary = try #require(FileHandle(forUpdatingAtPath: terminal.secondaryPath))
        let process = try SpawnedProcess(
            executable: CLIProcess.executable,
            arguments: ["get", "-i", "list.txt", "-j", "8", "-o", "out/", "--state", "state"],
            currentDirectory: scratch.url, standardInput: .nullDevice, standardOutput: .nullDevice,
            standardError: .handle(secondary))
        try secondary.close()
        #expect(await gate.waitUntilHeld(count: 8, timeout: CLIProcess.deadline), "\(gate)")
        // Well before the transfers' idle timeout (60 s), which would bring events of its own: the display must draw
        // the held state without another event.
        let fitted = try await eventually(timeout: .seconds(30)) { terminal.text.contains("… and 5 more") }
        #expect(fitted, "\(terminal.text.suffix(2000))")
        // Unknown, the height would allow 20 download lines: no "more" line at all with eight.
        gate.open()
        let termination = await process.exit()
        #expect(termination == .exited(0), "\(termination): \(terminal.text.suffix(2000))")
        for index in 0..<8 {
            let file = scratch.url.appendingPathComponent("out/t\(index).bin")
            try expectSameBytes(Data(contentsOf: file), Data(Resource.generatedBytes(seed: 20, range: 0..<(1 << 20))))
        }
    }
}
