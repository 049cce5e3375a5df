/// Content served by ``LoopbackServer`` at a path, with its validators and behavior.
///
/// A resource is a value: registering it again replaces the old one, which is how tests simulate a changed file
/// (new bytes, new ETag) between two requests. Each request takes the resource registered when its head is read
/// and keeps it to the end: a response already under way goes on with the bytes, length and validators it began
/// with (in-memory and generated bodies are immutable values; a file body is read through the descriptor opened
/// for that response), while every later request gets the new version.
public struct Resource: Sendable {
    /// A placeholder meaning "derive this validator automatically"; the default of the `etag` and `lastModified`
    /// parameters of the initializers. It is never stored: the initializer replaces it with the derived value.
    public static let automatic = "\u{1}automatic\u{1}"

    /// The content.
    public var body: Body
    /// The `ETag` header, sent byte-for-byte (e.g. `"\"v1\""` or `"W/\"v1\""`); `nil` sends no ETag.
    public var etag: String?
    /// The `Last-Modified` header, sent exactly; `nil` sends none.
    public var lastModified: String?
    /// The `Date` header; `nil` sends the current time in IMF-fixdate.
    public var date: String?
    /// The `Content-Type` header.
    public var contentType: String
    /// The `Content-Disposition` header, if any.
    public var contentDisposition: String?
    /// The `Accept-Ranges` header, `"bytes"` by default; `nil` omits it (ranges are still honoured).
    public var acceptRanges: String?
    /// Further headers added to every response for this resource, in order.
    public var extraHeaders: [HeaderField]
    /// How the server behaves when serving this resource.
    public var behavior: Behavior
    /// The most requests for this resource's path served at once; further ones are turned away (see
    /// ``ConcurrencyLimit``). `nil` (the default) falls back to ``LoopbackServer/Configuration/concurrencyLimit``.
    public var concurrencyLimit: ConcurrencyLimit?

    /// Creates a resource.
    ///
    /// - Parameters:
    ///   - body: The content.
    ///   - etag: The ETag; by default a strong tag derived from the content (for files: size, mtime and inode).
    ///   - lastModified: The Last-Modified value; by default one hour ago (for files: the modification time).
    ///   - date: The Date value; `nil` (the default) uses the current time for each response.
    ///   - contentType: The Content-Type, `application/octet-stream` by default.
    ///   - contentDisposition: The Content-Disposition, none by default.
    ///   - acceptRanges: The Accept-Ranges value, `"bytes"` by default.
    ///   - extraHeaders: Further headers.
    ///   - behavior: The behavior, ``Behavior/normal`` by default.
    ///   - concurrencyLimit: The most requests served at once, none by default.
    public init(
        body: Body,
        etag: String? = Resource.automatic,
        lastModified: String? = Resource.automatic,
        date: String? = nil,
        contentType: String = "application/octet-stream",
        contentDisposition: String? = nil,
        acceptRanges: String? = "bytes",
        extraHeaders: [HeaderField] = [],
        behavior: Behavior = .normal,
        concurrencyLimit: ConcurrencyLimit? = nil
    ) {
        self.body = body
        // The derived ETag hashes the content (for bytes): compute it at most once.
        let derived = etag == Resource.automatic || lastModified == Resource.automatic ? body.defaultETag : nil
        self.etag = etag == Resource.automatic ? derived : etag
        self.lastModified = lastModified == Resource.automatic ? body.defaultLastModified(etag: derived) : lastModified
        self.date = date
        self.contentType = contentType
        self.contentDisposition = contentDisposition
        self.acceptRanges = acceptRanges
        self.extraHeaders = extraHeaders
        self.behavior = behavior
        self.concurrencyLimit = concurrencyLimit
    }

    /// A resource holding `bytes`.
    ///
    /// - Parameters:
    ///   - bytes: The content.
    ///   - etag: The ETag; by default a strong tag derived from the bytes.
    ///   - lastModified: The Last-Modified value; by default one hour ago.
    ///   - date: The Date value; `nil` uses the current time.
    ///   - contentType: The Content-Type.
    ///   - contentDisposition: The Content-Disposition, if any.
    ///   - acceptRanges: The Accept-Ranges value.
    ///   - extraHeaders: Further headers.
    ///   - behavior: The behavior.
    ///   - concurrencyLimit: The most requests served at once, none by default.
    /// - Returns: The resource.
    public static func bytes(
        _ bytes: [UInt8],
        etag: String? = Resource.automatic,
        lastModified: String? = Resource.automatic,
        date: String? = nil,
        contentType: String = "application/octet-stream",
        contentDisposition: String? = nil,
        acceptRanges: String? = "bytes",
        extraHeaders: [HeaderField] = [],
        behavior: Behavior = .normal,
        concurrencyLimit: ConcurrencyLimit? = nil
    ) -> Resource {
        Resource(
            body: .bytes(bytes), etag: etag, lastModified: lastModified, date: date, contentType: contentType,
            contentDisposition: contentDisposition, acceptRanges: acceptRanges, extraHeaders: extraHeaders,
            behavior: behavior, concurrencyLimit: concurrencyLimit)
    }

    /// A resource with deterministic generated content of `length` bytes (see ``Resource/generatedBytes(seed:range:)``).
    ///
    /// - Parameters:
    ///   - length: The content length; may exceed 4 GiB, nothing is allocated.
    ///   - seed: The content seed.
    ///   - etag: The ETag; by default a strong tag derived from length and seed.
    ///   - lastModified: The Last-Modified value; by default one hour ago.
    ///   - date: The Date value; `nil` uses the current time.
    ///   - contentType: The Content-Type.
    ///   - contentDisposition: The Content-Disposition, if any.
    ///   - acceptRanges: The Accept-Ranges value.
    ///   - extraHeaders: Further headers.
    ///   - behavior: The behavior.
    ///   - concurrencyLimit: The most requests served at once, none by default.
    /// - Returns: The resource.
    public static func generated(
        length: Int64,
        seed: UInt64,
        etag: String? = Resource.automatic,
        lastModified: String? = Resource.automatic,
        date: String? = nil,
        contentType: String = "application/octet-stream",
        contentDisposition: String? = nil,
        acceptRanges: String? = "bytes",
        extraHeaders: [HeaderField] = [],
        behavior: Behavior = .normal,
        concurrencyLimit: ConcurrencyLimit? = nil
    ) -> Resource {
        Resource(
            body: .generated(length: length, seed: seed), etag: etag, lastModified: lastModified, date: date,
            contentType: contentType, contentDisposition: contentDisposition, acceptRanges: acceptRanges,
            extraHeaders: extraHeaders, behavior: behavior, concurrencyLimit: concurrencyLimit)
    }
}
