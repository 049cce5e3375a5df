import Foundation
import LoopbackServer
import Testing

@testable import Resumable

// The README's error-handling examples, compiled and run as written (only wrapped in functions). If this file
// stops compiling, the README is wrong: change both together.

/// README, "Errors, pauses and cancellation": a download in its own `Task`; cancelling that task pauses it.
func readmeStartDownload(url: URL, downloads: URL, tokenFile: URL) -> Task<Void, Never> {
    let download = Task {
        do throws(ResumableError) {
            let task = try DownloadTask(url: url, destination: .directory(downloads))
            let result = try await task.value
            print("saved", result.fileURL.path, result.mimeType ?? "")
        } catch let error where error.resumeToken != nil {
            // Paused (the Task was cancelled), deadline passed, or retries ran out: keep the token.
            try? error.resumeToken?.write(to: tokenFile)
        } catch {
            print(error.localizedDescription, error.isTransient ? "(try again later)" : "")
        }
    }
    return download
}

/// README, "Errors, pauses and cancellation": several downloads in a task group, each result typed.
func readmeDownloadAll(_ urls: [URL], into downloads: URL) async -> [URL: Result<URL, ResumableError>] {
    await withTaskGroup(of: (URL, Result<URL, ResumableError>).self) { group in
        for url in urls {
            group.addTask {
                do throws(ResumableError) {
                    let result = try await DownloadTask(url: url, destination: .directory(downloads)).value
                    return (url, .success(result.fileURL))
                } catch {
                    return (url, .failure(error))  // `error` is a ResumableError: typed throws, no cast
                }
            }
        }
        var results: [URL: Result<URL, ResumableError>] = [:]
        for await (url, result) in group { results[url] = result }
        return results
    }
}

/// README, "Configuration", as written.
func readmeConfiguration(tokenFile: URL, caFile: URL) -> DownloadTask.Configuration {
    var configuration = DownloadTask.Configuration.default
    configuration.headers = ["Authorization": "Bearer …"]  // never stored in a token, never sent cross-origin
    configuration.sensitiveHeaderNames = ["X-Tenant"]  // more names to treat so (X-Api-Key etc. already are)
    configuration.checkpointing = .file(tokenFile, interval: .seconds(1))  // kept true: removed when nothing is left
    configuration.expectedSHA256 = "9f86d08…"  // checked at once, kept in the token, verified on resume
    configuration.connectTimeout = .seconds(10)  // TCP + TLS + proxy tunnel; transient, retried
    configuration.idleTimeout = .seconds(60)  // a stalled transfer; transient, retried
    configuration.deadline = .seconds(3600)  // the whole task; ends with a token, not retried
    configuration.tls = .init(trust: .pemFile(caFile))  // a private CA; client certificates and pinning too
    configuration.proxy = .url(
        URL(string: "http://proxy.corp:3128")!,
        credentials: .init(user: "me", password: "…"))  // default: the environment, as curl
    return configuration
}

@Suite("README examples")
struct ReadmeExampleTests {
    @Test("Cancelling the README's download Task pauses it into a token file that resumes")
    func cancelPauses() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: 1_000_000)
        let gate = fixture.serveHeld(.bytes(content), after: 200_000)
        let tokenFile = fixture.directory.url.appendingPathComponent("file.token")
        let download = readmeStartDownload(
            url: fixture.server.url(for: "/file.bin"), downloads: fixture.directory.url, tokenFile: tokenFile)
        try await fixture.waitUntilHeld(at: gate, withOnDisk: 200_000)
        download.cancel()
        await download.value
        let token = try ResumeToken(contentsOf: tokenFile)
        #expect(token.offset == 200_000)
        gate.open()
        let result = try await DownloadTask.resume(from: token).value
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
    }

    @Test("The README's configuration is refused at once for its placeholder digest, naming it")
    func configuration() throws {
        let fixture = try DownloadFixture()
        let configuration = readmeConfiguration(
            tokenFile: fixture.directory.url.appendingPathComponent("t.token"),
            caFile: fixture.directory.url.appendingPathComponent("ca.pem"))
        #expect(configuration.deadline == .seconds(3600))
        do {
            _ = try DownloadTask(
                url: fixture.server.url(for: "/file.bin"), destination: .directory(fixture.directory.url),
                configuration: configuration)
            Issue.record("a placeholder digest and a missing CA file must be refused")
        } catch {
            #expect(error.code == .invalidRequest)
        }
        #expect(fixture.server.requests(for: "/file.bin").isEmpty)
    }

    @Test("The README's task group returns each file or its typed error")
    func taskGroup() async throws {
        let fixture = try DownloadFixture()
        let content = testBytes(count: 10_000)
        let good = fixture.serve(.bytes(content), at: "/good.bin")
        let missing = fixture.serve(.bytes(content, behavior: Behavior(status: 404)), at: "/missing.bin")
        let results = await readmeDownloadAll([good, missing], into: fixture.directory.url)
        let file = try results[good]?.get()
        try expectSameBytes(file.map(fixture.contents(of:)), content)
        guard case .failure(let error) = results[missing] else {
            Issue.record("expected the 404 to fail: \(String(describing: results[missing]))")
            return
        }
        #expect(error.code == .httpStatus)
        #expect(error.httpStatus == 404)
    }
}
