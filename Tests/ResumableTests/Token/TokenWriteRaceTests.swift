import Foundation
import Testing

@testable import Resumable

/// A token written over a path replaces only what its writer looked at; a token removed is only the writer's own.
///
/// The CLI looks at its token path (nothing there, its own token, an empty file the user named), then writes. Another
/// process may take the path in between: these tests put a file there between the look and the write, as that
/// process would, and check that the file survives byte for byte and that nothing is left beside it.
@Suite("Token writes and removals that race another file taking the path")
struct TokenWriteRaceTests {
    private static func token(tempPath: String = "/tmp/.resumable-00000000-0000-4000-8000-000000000000.partial")
        throws -> ResumeToken
    {
        .sample(tempPath: tempPath)
    }

    /// Replaces whatever is at `path` with a file holding `bytes`, atomically, as another program would.
    private static func putTheirs(_ bytes: [UInt8], at path: String) throws {
        let beside = path + ".theirs"
        try Data(bytes).write(to: URL(fileURLWithPath: beside))
        #expect(rename(beside, path) == 0)
    }

    @Test("A write that found nothing does not replace a file that took the name since")
    func nothingThenTheirs() throws {
        let directory = try TemporaryDirectory()
        let path = directory.url.appendingPathComponent("f.bin.resumable.json").path
        let looked = AtomicFile.Occupant.at(path)
        #expect(looked == .nothing)
        let theirs = Array("a finished download".utf8)
        try Self.putTheirs(theirs, at: path)

        #expect(try Self.token().write(to: URL(fileURLWithPath: path), replacing: looked) == false)
        #expect(FileManager.default.contents(atPath: path).map(Array.init) == theirs)
        #expect(directory.contents() == ["f.bin.resumable.json"])
    }

    @Test("A write that found its own token does not replace another file that took its place since")
    func ownThenTheirs() throws {
        let directory = try TemporaryDirectory()
        let url = directory.url.appendingPathComponent("f.bin.resumable.json")
        try Self.token().write(to: url)
        let looked = AtomicFile.Occupant.at(url.path)
        let theirs = Array("{\"not\": \"a token\"}".utf8)
        try Self.putTheirs(theirs, at: url.path)

        #expect(try Self.token().write(to: url, replacing: looked) == false)
        #expect(FileManager.default.contents(atPath: url.path).map(Array.init) == theirs)
        #expect(directory.contents() == ["f.bin.resumable.json"])
    }

    @Test("A write that found its own token, still there, replaces it and leaves nothing beside")
    func ownStillThere() throws {
        let directory = try TemporaryDirectory()
        let url = directory.url.appendingPathComponent("f.bin.resumable.json")
        try Self.token().write(to: url)
        let looked = AtomicFile.Occupant.at(url.path)
        let newer = try Self.token(tempPath: "/tmp/.resumable-11111111-1111-4111-8111-111111111111.partial")

        #expect(try newer.write(to: url, replacing: looked))
        #expect(try ResumeToken(contentsOf: url).tempPath == newer.tempPath)
        #expect(AtomicFile.Occupant.at(url.path) != looked)
        #expect(directory.contents() == ["f.bin.resumable.json"])
    }

    @Test("A write that found a file which is gone since writes nothing, and one that found nothing writes")
    func ownThenGone() throws {
        let directory = try TemporaryDirectory()
        let url = directory.url.appendingPathComponent("f.bin.resumable.json")
        try Self.token().write(to: url)
        let looked = AtomicFile.Occupant.at(url.path)
        #expect(unlink(url.path) == 0)

        #expect(try Self.token().write(to: url, replacing: looked) == false)
        #expect(directory.contents().isEmpty)
        #expect(try Self.token().write(to: url, replacing: .nothing))
        #expect(try ResumeToken(contentsOf: url) == Self.token())
        #expect(directory.contents() == ["f.bin.resumable.json"])
    }

    @Test("A symbolic link that took the name is neither followed nor replaced")
    func linkThenWrite() throws {
        let directory = try TemporaryDirectory()
        let url = directory.url.appendingPathComponent("f.bin.resumable.json")
        let target = directory.url.appendingPathComponent("elsewhere")
        try Data("theirs".utf8).write(to: target)
        #expect(symlink(target.path, url.path) == 0)

        #expect(try Self.token().write(to: url, replacing: .nothing) == false)
        #expect(FileManager.default.contents(atPath: target.path) == Data("theirs".utf8))
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: url.path) == target.path)
        #expect(directory.contents().sorted() == ["elsewhere", "f.bin.resumable.json"])
    }

    @Test("Removing a token removes only a token naming the temporary file, and leaves nothing beside")
    func removal() throws {
        let directory = try TemporaryDirectory()
        let url = directory.url.appendingPathComponent("f.bin.resumable.json")
        let token = try Self.token()
        try token.write(to: url)
        #expect(!ResumeToken.removeFile(at: url, ifItNames: "/tmp/.resumable-other.partial"))
        #expect(try ResumeToken(contentsOf: url) == token)

        try Self.putTheirs(Array("a finished download".utf8), at: url.path)
        #expect(!ResumeToken.removeFile(at: url, ifItNames: token.tempPath))
        #expect(FileManager.default.contents(atPath: url.path) == Data("a finished download".utf8))

        try token.write(to: url)
        #expect(ResumeToken.removeFile(at: url, ifItNames: token.tempPath))
        #expect(directory.contents().isEmpty)
    }
}
