import Foundation
import Testing

@testable import Resumable

/// Adversarial review of the day's transport changes: user information found by bytes, ASCII header names.
@Suite("Transport attack: credentials in URLs and header names")
struct CredentialAndHeaderAttackTests {
    /// Rule 3: credentials never reach a token, a record or a message. Each URL carries `secret` in its user
    /// information; `hasUserInfo` must see it and `removingUserInfo` must drop it, leaving the rest as it was.
    @Test(
        "User information is found and removed in tricky URLs",
        arguments: [
            "http://user:secret@[::1]:8080/a", "http://user%40x:secret@host/a", "http://:secret@host/",
            "http://secret:@host/", "http://secret@host/", "http://user:secret@host/p@q?x=@y#@z",
            "http://user:secret@host?a=b://c@d", "http://user:secret@host#f://g@h", "HTTP://user:secret@HOST/",
            "http://user:secret@host/%C3%A9", "http://user:secret@host/é", "http://user:secret@bücher.example/",
            "http://a@b:secret@host/", "https://user:secret@host:443", "http://user:sec%2Fret@host/",
            "http://user:secret@127.0.0.1/", "http://user:secret@[fe80::1%25eth0]/",
        ])
    func userInfoRemoved(_ text: String) throws {
        guard let url = URL(string: text) else { return }  // Not a URL Foundation makes: nothing to strip.
        #expect(HTTPURL.hasUserInfo(url), "\(text)")
        let stripped = HTTPURL.removingUserInfo(url)
        #expect(!stripped.absoluteString.contains("secret"), "\(text) -> \(stripped.absoluteString)")
        #expect(!HTTPURL.hasUserInfo(stripped), "\(text) -> \(stripped.absoluteString)")
        #expect(stripped.host != nil, "\(text) -> \(stripped.absoluteString)")
    }

    /// A URL without user information is left exactly as it is: `@` and `://` in the path, query or fragment are
    /// not user information.
    @Test(
        "URLs without user information are unchanged",
        arguments: [
            "http://host/p@q", "http://host/?a=http://u:p@x", "http://host#u:p@x", "http://[::1]:8080/@",
            "http://host/a://b@c", "http://host:80/é@", "http://host?@", "https://host/%40/x@y",
        ])
    func noUserInfoUnchanged(_ text: String) throws {
        guard let url = URL(string: text) else { return }
        #expect(!HTTPURL.hasUserInfo(url), "\(text)")
        #expect(HTTPURL.removingUserInfo(url).absoluteString == url.absoluteString, "\(text)")
    }

    /// Header names are tokens: no Unicode folding (`K` U+212A is not `k`), and whitespace-only values are empty.
    @Test("Header lines: odd whitespace and non-ASCII names")
    func headerLines() {
        var collector = HeadCollector()
        func feed(_ line: String) -> HeadCollector.Step {
            Array(line.utf8).withUnsafeBytes { collector.append($0) }
        }
        for line in [
            "HTTP/1.1 200 OK\r\n", "Content-Lengt\u{212A}: 5\r\n", "X-Empty: \t \r\n", "X-Fold: a\r\n", "\t b \r\n",
        ] {
            _ = feed(line)
        }
        guard case .complete(let head) = feed("\r\n") else {
            return #expect(Bool(false), "the head did not complete")
        }
        #expect(head.value("Content-Length") == nil)
        #expect(head.value("x-empty") == "")
        #expect(head.value("x-fold") == "a b")
    }
}
