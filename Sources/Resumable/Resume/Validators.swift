import Foundation

/// The validators the bytes on disk were received under, exactly as received.
struct Validators: Hashable, Sendable {
    var etag: String?
    var lastModified: String?
    var responseDate: String?

    /// The value for `If-Range`: a strong entity tag, or else a strong Last-Modified date (RFC 9110
    /// §13.1.5, §8.8.2.2); `nil` when neither is usable.
    var ifRange: String? {
        if etag != nil { return strongETag }
        return strongLastModified
    }

    /// The entity tag, when it is strong and can be sent back byte for byte.
    ///
    /// A tag with bytes beyond ASCII (`obs-text`) is not used: a transport hands header bytes that are not UTF-8 over
    /// as ISO-8859-1 characters, which go back out as UTF-8, so `If-Range` would name another tag, one a changed file
    /// may have (measured: `ETag: "\xFF"` went back as `"\xC3\xBF"`). Without it, a resume starts over: with an entity
    /// tag present, `If-Range` never carries a date instead (RFC 9110 §13.1.5).
    var strongETag: String? {
        guard let etag, etag.utf8.allSatisfy({ $0 < 0x80 }), let tag = EntityTag(etag), !tag.isWeak else { return nil }
        return etag
    }

    /// The Last-Modified date, when it is strong: at least a second before the `Date` of the response that carried
    /// it (RFC 9110 §8.8.2.2).
    var strongLastModified: String? {
        guard let lastModified, let modified = HTTPDate.parse(lastModified),
            let dateHeader = responseDate, let date = HTTPDate.parse(dateHeader),
            date.timeIntervalSince(modified) >= 1
        else { return nil }
        return lastModified
    }

    /// The validators a response carries; values a header could not carry are dropped.
    init(of head: ResponseHead) {
        etag = head.value("ETag").flatMap {
            $0.utf8.count <= HTTPFieldSyntax.maximumStoredValueLength && EntityTag($0) != nil ? $0 : nil
        }
        lastModified = head.value("Last-Modified").flatMap { HTTPFieldSyntax.isStorableValue($0) ? $0 : nil }
        responseDate = head.value("Date").flatMap { HTTPFieldSyntax.isStorableValue($0) ? $0 : nil }
    }

    init(etag: String? = nil, lastModified: String? = nil, responseDate: String? = nil) {
        self.etag = etag
        self.lastModified = lastModified
        self.responseDate = responseDate
    }

    /// Whether `head` names the representation these validators describe: the stored ETag when there is one, else the
    /// stored Last-Modified date.
    func named(by head: ResponseHead) -> Bool {
        if let etag { return Self.identical(head.value("ETag"), etag) }
        if let lastModified { return Self.identical(head.value("Last-Modified"), lastModified) }
        return false
    }

    /// Whether `head` carries these validators and no others: what a 206 must show to be joined (RFC 9110 §15.3.7 asks
    /// a 206 for the validators a 200 would carry).
    func confirmed(by head: ResponseHead) -> Bool {
        named(by: head) && agree(with: head)
    }

    /// Whether a response carries a validator of a kind these have too, with another value: what shows another
    /// version. A validator only one side has shows nothing either way (origins and caches add and drop them).
    func conflict(with head: ResponseHead) -> Bool {
        if let etag = head.value("ETag"), let stored = self.etag, !Self.identical(etag, stored) { return true }
        if let lastModified = head.value("Last-Modified"), let stored = self.lastModified,
            !Self.identical(lastModified, stored)
        {
            return true
        }
        return false
    }

    /// Whether a response's validators, where it sends any, are these (RFC 9110 §15.3.7.3).
    ///
    /// Its raw `ETag` counts, even one that is no entity tag (`ETag: abc123`, without quotes), which ``init(of:)``
    /// does not keep: such a value changes with the file as a real tag does, and it may be the only header that shows
    /// a new version whose `Last-Modified` stayed the same (a file written again within the second, `cp -p`). Since
    /// the value was not kept, an answer that carries one never agrees, and a resume of such a server starts over:
    /// bytes lost, never two versions joined.
    func agree(with head: ResponseHead) -> Bool {
        if let etag = head.value("ETag"), !Self.identical(etag, self.etag) { return false }
        if let lastModified = head.value("Last-Modified"), !Self.identical(lastModified, self.lastModified) {
            return false
        }
        return true
    }

    /// Whether `head` carries the strong validator these have, so that it is the same representation byte for byte
    /// (RFC 9110 §8.8.1), of the same length: the same strong entity tag, or, where neither side has an entity tag, the
    /// same strong Last-Modified date.
    func vouchForSameBytes(as head: ResponseHead) -> Bool {
        let sent = Validators(of: head)
        if let tag = strongETag { return Self.identical(sent.etag, tag) }
        // The raw header: an unquoted `ETag` may be what shows another version (see ``agree(with:)``).
        guard etag == nil, head.value("ETag") == nil, let date = strongLastModified else { return false }
        return Self.identical(sent.lastModified, date)
    }

    /// Whether two validator values are the same bytes. Never `String ==`, which holds canonically equivalent text
    /// equal: `"K"` and `"\u{212A}"` (the Kelvin sign) are two entity tags to a server, which compares octets (RFC
    /// 9110 §8.8.3.2), and taking them for one joined two versions of a file.
    static func identical(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case (nil, nil): true
        case (let a?, let b?): a.utf8.elementsEqual(b.utf8)
        default: false
        }
    }
}
