import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A resource's content opened for one response: bytes, a generator or a file descriptor.
///
/// Owned by a single connection thread; a file descriptor is closed on deinit.
final class ContentSource {
    private enum Storage {
        case bytes([UInt8])
        case generated(seed: UInt64)
        case file(descriptor: Int32)
    }

    private let storage: Storage
    /// The content length at the time of opening.
    let length: Int64
    /// The file facts for file-backed content, `nil` otherwise.
    let fileInfo: FileInfo?

    /// Opens `body`; returns `nil` when a file cannot be opened or is not a regular file.
    init?(body: Resource.Body) {
        switch body {
        case .bytes(let bytes):
            storage = .bytes(bytes)
            length = Int64(bytes.count)
            fileInfo = nil
        case .generated(let length, let seed):
            storage = .generated(seed: seed)
            self.length = max(0, length)
            fileInfo = nil
        case .file(let url):
            let descriptor = open(url.path, O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else { return nil }
            guard let info = FileInfo.of(descriptor: descriptor), info.isRegularFile else {
                close(descriptor)
                return nil
            }
            storage = .file(descriptor: descriptor)
            length = info.size
            fileInfo = info
        }
    }

    deinit {
        if case .file(let descriptor) = storage {
            close(descriptor)
        }
    }

    /// Fills `buffer` with content starting at `offset`; returns how many bytes were filled.
    ///
    /// Fewer bytes than `buffer.count` are returned only at the end of the content (a file that shrank, or a read
    /// error).
    func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard offset >= 0, offset < length, buffer.count > 0 else { return 0 }
        let wanted = Int(min(Int64(buffer.count), length - offset))
        switch storage {
        case .bytes(let bytes):
            bytes.withUnsafeBytes { source in
                let start = Int(offset)
                buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[start..<start + wanted]))
            }
            return wanted
        case .generated(let seed):
            GeneratedContent.fill(
                UnsafeMutableRawBufferPointer(rebasing: buffer[0..<wanted]), seed: seed, start: offset)
            return wanted
        case .file(let descriptor):
            var filled = 0
            while filled < wanted {
                guard let base = buffer.baseAddress else { return filled }
                let result = pread(descriptor, base + filled, wanted - filled, off_t(offset + Int64(filled)))
                if result > 0 {
                    filled += result
                } else if result < 0 && errno == EINTR {
                    continue
                } else {
                    break
                }
            }
            return filled
        }
    }

    /// Reads `range` into a new array (for small ranges).
    func bytes(in range: Range<Int64>) -> [UInt8] {
        let clamped = range.clamped(to: 0..<length)
        guard !clamped.isEmpty else { return [] }
        var output = [UInt8](repeating: 0, count: Int(clamped.count))
        let filled = output.withUnsafeMutableBytes { read(at: clamped.lowerBound, into: $0) }
        output.removeLast(output.count - filled)
        return output
    }
}
