import Foundation
import LoopbackServer
import Testing

@testable import Resumable

/// Part D of the protocol rules: names and places.
@Suite("File names and destinations")
struct FileNamingTests {
    @Test("wget Content-Disposition: the file is saved under the header's name", arguments: TransportKind.all)
    func contentDispositionName(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes(testBytes(count: 100), contentDisposition: "attachment; filename=\"filename.html\""))
        let result = try await fixture.download().value
        #expect(result.fileURL.lastPathComponent == "filename.html")
        #expect(
            result.fileURL.deletingLastPathComponent().standardizedFileURL == fixture.directory.url.standardizedFileURL)
    }

    @Test("filename* (RFC 8187) wins over filename", arguments: TransportKind.all)
    func extendedFilename(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(
            .bytes(
                testBytes(count: 100),
                contentDisposition: "attachment; filename=\"plain.txt\"; filename*=UTF-8''%e2%82%ac%20rates.txt"
            )
        )
        let result = try await fixture.download().value
        #expect(result.fileURL.lastPathComponent == "€ rates.txt")
    }

    @Test(
        "Hostile server-supplied names land inside the chosen directory under a safe name",
        arguments: TransportKind.all,
        [
            "attachment; filename=\"../../etc/passwd\"",
            "attachment; filename=\"/etc/passwd\"",
            "attachment; filename=\"..\\\\..\\\\boot.ini\"",
            "attachment; filename*=UTF-8''..%2F..%2Fescape.txt",
            "attachment; filename*=UTF-8''a%00b.txt",
            "attachment; filename=\"\u{1}\u{7}bell.txt\"",
            "attachment; filename=\"..\"",
            "attachment; filename=\"...\"",
            "attachment; filename=\".bashrc\"",
            "attachment; filename=\"\(String(repeating: "x", count: 600)).bin\"",
        ]
    )
    func hostileNames(transport: TransportKind, disposition: String) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 100)
        fixture.serve(.bytes(content, contentDisposition: disposition))
        let result = try await fixture.download().value
        let name = result.fileURL.lastPathComponent
        #expect(
            result.fileURL.deletingLastPathComponent().standardizedFileURL == fixture.directory.url.standardizedFileURL)
        #expect(!name.hasPrefix("."))
        #expect(!name.contains("/") && !name.contains("\\") && !name.contains("\0"))
        #expect(name.utf8.count <= 200)
        #expect(!name.unicodeScalars.contains { $0.value < 0x20 })
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.directory.contents() == [name])
    }

    @Test(
        "Without Content-Disposition the name is the URL's last path component, then the host",
        arguments: TransportKind.all)
    func nameFromURL(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        fixture.serve(.bytes([1]), at: "/dir/some%20file.tar.gz")
        let named = try await fixture.download("/dir/some%20file.tar.gz").value
        #expect(named.fileURL.lastPathComponent == "some file.tar.gz")
        fixture.serve(.bytes([2]), at: "/")
        let host = try await fixture.download("/").value
        #expect(host.fileURL.lastPathComponent == "127.0.0.1")
    }

    @Test("An existing file is never overwritten by default: a free name is chosen", arguments: TransportKind.all)
    func freeNameOnCollision(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let existing = fixture.directory.url.appendingPathComponent("report.pdf")
        try Data("mine".utf8).write(to: existing)
        fixture.serve(.bytes(testBytes(count: 10)), at: "/report.pdf")
        let first = try await fixture.download("/report.pdf").value
        let second = try await fixture.download("/report.pdf").value
        #expect(first.fileURL.lastPathComponent == "report (1).pdf")
        #expect(second.fileURL.lastPathComponent == "report (2).pdf")
        try expectSameBytes(Data(contentsOf: existing), Data("mine".utf8))
    }

    @Test("Overwriting replaces the existing file when asked; failing keeps the token", arguments: TransportKind.all)
    func overwriteAndFailPolicies(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let existing = fixture.directory.url.appendingPathComponent("file.bin")
        try Data("mine".utf8).write(to: existing)
        let content = testBytes(count: 10)
        fixture.serve(.bytes(content))
        let replaced = try await fixture.download(
            configuration: DownloadFixture.configuration(existingFile: .overwrite)
        ).value
        #expect(replaced.fileURL.lastPathComponent == "file.bin")
        try expectSameBytes(fixture.contents(of: existing), content)

        let refused = try #require(
            await failure(of: fixture.download(configuration: DownloadFixture.configuration(existingFile: .fail)))
        )
        #expect(refused.code == .destinationExists)
        #expect(refused.resumeToken?.offset == 10)
    }

    @Test(
        "A temporary directory on another file system: the finished file is copied beside the destination, then linked",
        arguments: [DownloadTask.ExistingFilePolicy.chooseFreeName, .overwrite]
    )
    func acrossFileSystems(policy: DownloadTask.ExistingFilePolicy) async throws {
        let shm = URL(fileURLWithPath: "/dev/shm", isDirectory: true)
        guard FileManager.default.fileExists(atPath: shm.path) else {
            print("⚠️ no /dev/shm: the cross-file-system finish was not tested")
            return
        }
        let temporary = shm.appendingPathComponent("resumable-tests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: temporary, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: temporary) }
        let fixture = try DownloadFixture()
        let content = testBytes(count: 3_000_000)
        fixture.serve(.bytes(content))
        var configuration = DownloadFixture.configuration(existingFile: policy)
        configuration.temporaryDirectory = temporary
        let result = try await fixture.download(configuration: configuration).value
        #expect(
            result.fileURL.deletingLastPathComponent().standardizedFileURL == fixture.directory.url.standardizedFileURL)
        try expectSameBytes(fixture.contents(of: result.fileURL), content)
        #expect(fixture.directory.contents() == ["file.bin"], "no copy is left beside the destination")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: temporary.path).isEmpty,
            "nor in the temporary directory")
    }

    @Test("An exact file destination is honoured, and the temporary file sits next to it", arguments: TransportKind.all)
    func exactFileDestination(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 5000)
        fixture.serve(.bytes(content, contentDisposition: "attachment; filename=\"ignored.bin\""))
        let target = fixture.directory.url.appendingPathComponent("chosen.dat")
        fixture.server.enqueue(behavior: Behavior(dropAfterBytes: 1000), for: "/file.bin")
        let task = try DownloadTask(
            url: fixture.server.url(for: "/file.bin"),
            destination: .file(target),
            configuration: DownloadFixture.configuration(retries: 0, transport: transport)
        )
        let token = try #require(await failure(of: task)?.resumeToken)
        #expect(token.destination == target.standardizedFileURL.path)
        #expect(
            URL(fileURLWithPath: token.tempPath).deletingLastPathComponent().standardizedFileURL
                == fixture.directory.url.standardizedFileURL
        )
        let result = try await fixture.resumeThroughDisk(token).value
        #expect(result.fileURL.standardizedFileURL == target.standardizedFileURL)
        try expectSameBytes(fixture.contents(of: target), content)
    }

    @Test("The suggested name comes from the first response; a 206 need not repeat it", arguments: TransportKind.all)
    func nameKeptAcrossResume(transport: TransportKind) async throws {
        let fixture = try DownloadFixture(transport: transport)
        let content = testBytes(count: 5000)
        fixture.serve(.bytes(content, contentDisposition: "attachment; filename=\"kept.iso\""))
        let token = try await fixture.interruptedToken(after: 2000)
        #expect(token.suggestedFilename == "kept.iso")
        fixture.serve(.bytes(content))
        let result = try await fixture.resumeThroughDisk(token).value
        #expect(result.fileURL.lastPathComponent == "kept.iso")
    }
}
