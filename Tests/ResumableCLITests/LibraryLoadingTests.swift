import Foundation
import LoopbackServer
import Testing

/// What loading libcurl costs before the first request.
@Suite("libcurl loading")
struct LibraryLoadingTests {
    /// `curl_version()` of Debian's libcurl asks libldap for its version, which initializes libldap: a lookup of this
    /// machine's own name (DNS when the name is not in `/etc/hosts`, which can take the resolver's timeout on a
    /// machine without a network) and the loading of every SASL plugin. Nothing of Resumable asks for that string.
    /// The dynamic loader's own report (`LD_DEBUG=libs`, glibc) names every library the process initializes.
    @Test("A download initializes no SASL plugin (libldap is never initialized)")
    func noLDAPInitialization() async throws {
        #if os(Linux)
            let plugins = ["/usr/lib/x86_64-linux-gnu/sasl2", "/usr/lib/aarch64-linux-gnu/sasl2"].filter {
                ((try? FileManager.default.contentsOfDirectory(atPath: $0)) ?? []).contains { $0.hasSuffix(".so") }
            }
            try #require(!plugins.isEmpty, "no SASL plugins on this machine: the check below could not fail")
            let served = try ServedFile(length: 4096)
            let scratch = try ScratchDirectory()
            let result = try await CLIProcess.run(
                ["get", served.url, "-q"], in: scratch.url, environment: ["LD_DEBUG": "libs"])
            #expect(result.exitCode == 0, "\(result)")
            let initialized = result.stderrLines.filter { $0.contains("calling init:") }
            #expect(initialized.contains { $0.contains("libcurl.so") }, "the loader's report is missing: \(result)")
            #expect(!initialized.contains { $0.contains("/sasl2/") }, "\(initialized.filter { $0.contains("sasl2") })")
        #endif
    }
}
