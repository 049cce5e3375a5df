import CResumable
import Foundation
import Synchronization

/// libcurl, loaded at run time through the C shim in `CResumable` (`dlopen`, no headers, no link-time
/// dependency).
///
/// A library is loaded once per name and kept for the life of the process; a failure is remembered too, so
/// asking again is cheap. On Linux this is the same `libcurl.so.4` that FoundationNetworking loads.
final class CurlLibrary: @unchecked Sendable {
    // @unchecked: `table` points at an immutable table of function pointers that is never freed, and libcurl's
    // global functions are thread-safe; handles made from it are confined to one transfer's thread.

    /// The table of entry points the shim resolved.
    ///
    /// Not `curl_version()`: Debian's libcurl puts the LDAP library's version in that string, and asking libldap for
    /// it initializes libldap: a lookup of this machine's own name (resolver files, DNS when the name is not in
    /// `/etc/hosts`) and the loading of eight SASL plugins, before the first request (measured: most of the 15 ms
    /// between the start of `resumable get` and its first request).
    let table: OpaquePointer

    private init(table: OpaquePointer) {
        self.table = table
    }

    /// The name the system's libcurl is loaded under.
    #if canImport(Darwin)
        static let defaultName = "libcurl.4.dylib"
    #else
        static let defaultName = "libcurl.so.4"
    #endif

    private static let loaded = Mutex<[String: Result<CurlLibrary, ResumableError>]>([:])

    /// The library called `name` (a soname or a path), loading it on first use.
    ///
    /// Fails with ``ResumableError/Code/invalidRequest`` when the library or one of the functions the transport
    /// needs (libcurl 7.68 or later) is missing.
    static func load(_ name: String = defaultName) -> Result<CurlLibrary, ResumableError> {
        loaded.withLock { loaded in
            if let known = loaded[name] { return known }
            var error = [CChar](repeating: 0, count: 512)
            let table = error.withUnsafeMutableBufferPointer { buffer in
                cresumable_curl_open(name, buffer.baseAddress, buffer.count)
            }
            let result: Result<CurlLibrary, ResumableError>
            if let table {
                result = .success(CurlLibrary(table: table))
            } else {
                let reason = String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                result = .failure(ResumableError(.invalidRequest, "libcurl could not be loaded: \(reason)"))
            }
            loaded[name] = result
            return result
        }
    }

    /// curl's own sentence for an easy result code.
    func describe(_ code: Int32) -> String {
        String(cString: cresumable_curl_easy_strerror(table, code))
    }

    /// curl's own sentence for a multi result code.
    func describeMulti(_ code: Int32) -> String {
        String(cString: cresumable_curl_multi_strerror(table, code))
    }
}
