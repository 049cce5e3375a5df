import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Unbuffered writes to standard output and standard error.
///
/// Everything the tool prints goes through here with `write(2)`, so output reaches a pipe at once (tests and
/// scripts read it while the process runs) and nothing is lost when the process ends with `exit`.
///
/// Standard error is for people, and its messages quote servers and tokens (`error: …` lines carry reason
/// phrases, header values and paths): ``err(_:)`` escapes control characters other than line feed and tab
/// (``TerminalText``). Standard output carries results that scripts use as they are (the finished file's path,
/// JSON, which is escaped already); commands escape what they print there for people, as `inspect` does.
enum Console {
    /// Writes `text` followed by a newline to standard output.
    static func out(_ text: String) {
        write(text + "\n", to: STDOUT_FILENO)
    }

    /// Writes `text` followed by a newline to standard error, control characters escaped except line feeds and
    /// tabs.
    static func err(_ text: String) {
        write(TerminalText.escaped(text, keepingLineBreaks: true) + "\n", to: STDERR_FILENO)
    }

    /// Writes `text` as is (no newline) to standard error: only for the tool's own terminal sequences (the
    /// progress bar), never for text from outside.
    static func errRaw(_ text: String) {
        write(text, to: STDERR_FILENO)
    }

    /// Whether standard error is a terminal.
    static var stderrIsTerminal: Bool {
        isatty(STDERR_FILENO) == 1
    }

    /// The width of the terminal on standard error, 80 when unknown.
    static var terminalWidth: Int {
        terminalSize?.columns ?? 80
    }

    /// The size of the terminal on standard error; `nil` when it is not a terminal or does not say.
    static var terminalSize: (columns: Int, rows: Int?)? {
        var size = winsize()
        #if canImport(Glibc)
            let request = UInt(TIOCGWINSZ)
        #else
            let request = TIOCGWINSZ
        #endif
        guard ioctl(STDERR_FILENO, request, &size) == 0, size.ws_col > 0 else { return nil }
        return (Int(size.ws_col), size.ws_row > 0 ? Int(size.ws_row) : nil)
    }

    private static func write(_ text: String, to descriptor: Int32) {
        var bytes = Array(text.utf8)
        bytes.withUnsafeMutableBytes { buffer in
            guard let base = buffer.baseAddress else { return }
            var written = 0
            while written < buffer.count {
                #if canImport(Glibc)
                    let count = Glibc.write(descriptor, base.advanced(by: written), buffer.count - written)
                #else
                    let count = Darwin.write(descriptor, base.advanced(by: written), buffer.count - written)
                #endif
                if count < 0 {
                    if errno == EINTR { continue }
                    return  // A closed pipe or a full disk: nothing sensible to do with output.
                }
                written += count
            }
        }
    }
}
