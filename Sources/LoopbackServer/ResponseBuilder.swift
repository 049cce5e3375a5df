import Foundation

/// Decides the response to a request: status, headers and body parts (RFC 9110 range semantics plus misbehavior).
struct ResponseBuilder {
    /// The boundary used for `multipart/byteranges` answers.
    static let multipartBoundary = "LoopbackServerByteRangesBoundary"

    let head: HTTPRequestHead
    let configuration: LoopbackServer.Configuration

    private var isHead: Bool { head.method == "HEAD" }

    /// A plan for a scripted response: everything raw.
    func scripted(_ response: ScriptedResponse) -> ResponsePlan {
        var plan = ResponsePlan(status: 0, rawStatusLine: response.statusLine, headers: response.headers)
        plan.parts = [.literal(response.body)]
        plan.dropAfterBytes = response.closeAfterBodyBytes.map(Int64.init) ?? configuration.dropAfterBytes
        plan.resetOnDrop = response.resetOnClose
        plan.throttleBytesPerSecond = configuration.throttleBytesPerSecond
        return plan
    }

    /// A small HTML page with `status` (405, 404, 400, …) carrying only the server-wide transfer settings.
    func errorPage(_ status: Int, extraHeaders: [HeaderField] = []) -> ResponsePlan {
        var plan = htmlPlan(status: status, headers: extraHeaders, behavior: .normal)
        plan.dropAfterBytes = configuration.dropAfterBytes
        plan.throttleBytesPerSecond = configuration.throttleBytesPerSecond
        return plan
    }

    /// The answer to a request turned away by `limit`: its status and `Retry-After` on a small HTML page, sent
    /// whole and at once (no server-wide pacing or cut-off).
    func overload(_ limit: ConcurrencyLimit) -> ResponsePlan {
        var headers: [HeaderField] = []
        if let retryAfter = limit.retryAfter { headers.append(HeaderField("Retry-After", retryAfter)) }
        var plan = htmlPlan(status: limit.status, headers: headers, behavior: .normal)
        plan.dropAfterBytes = nil
        plan.throttleBytesPerSecond = nil
        plan.keepAlive = configuration.keepAlive && requestAllowsKeepAlive
        return plan
    }

    /// The response for a GET or HEAD of `resource` with `behavior`.
    ///
    /// - Parameters:
    ///   - resource: The resource (for static files: with validators already taken from the open file).
    ///   - behavior: The effective behavior (queued one-shot or the resource's own).
    ///   - source: The opened content.
    func content(resource: Resource, behavior: Behavior, source: ContentSource) -> ResponsePlan {
        let length = source.length
        var validators: [HeaderField] = []
        if let etag = resource.etag { validators.append(HeaderField("ETag", etag)) }
        if let lastModified = resource.lastModified { validators.append(HeaderField("Last-Modified", lastModified)) }
        if let acceptRanges = resource.acceptRanges { validators.append(HeaderField("Accept-Ranges", acceptRanges)) }
        if let disposition = resource.contentDisposition {
            validators.append(HeaderField("Content-Disposition", disposition))
        }
        if let retryAfter = behavior.retryAfter { validators.append(HeaderField("Retry-After", retryAfter)) }
        validators += resource.extraHeaders

        if behavior.gzipWhenAccepted && Validators.acceptsGzip(head.header("Accept-Encoding")) {
            var plan = bodyPlan(
                status: 200, behavior: behavior, date: resource.date,
                leading: [
                    HeaderField("Content-Type", resource.contentType), HeaderField("Content-Encoding", "gzip"),
                    HeaderField("Vary", "Accept-Encoding"),
                ],
                trailing: validators,
                parts: [.literal(GzipFraming.header), .storedDeflate(0..<length), .gzipTrailer(length: length)])
            plan.includesBody = !isHead
            return plan
        }

        let whole = bodyPlan(
            status: 200, behavior: behavior, date: resource.date,
            leading: [HeaderField("Content-Type", resource.contentType)], trailing: validators,
            parts: [.content(0..<length)])
        guard !behavior.ignoreRange, let rangeValue = head.header("Range"),
            let specs = ByteRangeSpec.parse(rangeValue)
        else { return whole }
        if let ifRange = head.header("If-Range"), !behavior.ignoreIfRange {
            let isEntityTag = ifRange.hasPrefix("\"") || ifRange.hasPrefix("W/")
            if (behavior.ifRangeHonorsDatesOnly && isEntityTag)
                || !Validators.ifRangeMatches(ifRange, etag: resource.etag, lastModified: resource.lastModified)
            {
                return whole
            }
        }
        let satisfiable = specs.compactMap { $0.resolve(length: length) }
        guard !satisfiable.isEmpty else {
            var headers = validators
            if !behavior.omitContentRangeOn416 {
                headers.insert(HeaderField("Content-Range", "bytes */\(length)"), at: 0)
            }
            return htmlPlan(status: 416, headers: headers, behavior: behavior, date: resource.date)
        }
        let served = satisfiable.map { adjust($0, length: length, behavior: behavior) }
        if behavior.multipartRanges {
            var parts: [ResponsePlan.BodyPart] = []
            for (index, range) in served.enumerated() {
                let partHead =
                    (index == 0 ? "" : "\r\n") + "--\(Self.multipartBoundary)\r\n"
                    + "Content-Type: \(resource.contentType)\r\n"
                    + "Content-Range: bytes \(range.lowerBound)-\(range.upperBound)/\(length)\r\n\r\n"
                parts.append(.literal(Array(partHead.utf8)))
                parts.append(.content(range.lowerBound..<range.upperBound + 1))
            }
            parts.append(.literal(Array("\r\n--\(Self.multipartBoundary)--\r\n".utf8)))
            let contentType = "multipart/byteranges; boundary=\(Self.multipartBoundary)"
            return bodyPlan(
                status: 206, behavior: behavior, date: resource.date,
                leading: [HeaderField("Content-Type", contentType)], trailing: validators, parts: parts)
        }
        guard served.count == 1, let range = served.first else { return whole }
        let contentRange = behavior.extraContentRange ?? "bytes \(range.lowerBound)-\(range.upperBound)/\(length)"
        return bodyPlan(
            status: 206, behavior: behavior, date: resource.date,
            leading: [HeaderField("Content-Type", resource.contentType), HeaderField("Content-Range", contentRange)],
            trailing: validators, parts: [.content(range.lowerBound..<range.upperBound + 1)])
    }

    /// The HTML answer for ``Behavior/status``.
    func status(_ status: Int, resource: Resource, behavior: Behavior) -> ResponsePlan {
        var headers: [HeaderField] = []
        if let retryAfter = behavior.retryAfter { headers.append(HeaderField("Retry-After", retryAfter)) }
        return htmlPlan(status: status, headers: headers + resource.extraHeaders, behavior: behavior)
    }

    /// The answer for ``Behavior/redirect``.
    func redirect(_ redirect: Redirect, resource: Resource, behavior: Behavior) -> ResponsePlan {
        var headers = [HeaderField("Location", redirect.location)]
        if let retryAfter = behavior.retryAfter { headers.append(HeaderField("Retry-After", retryAfter)) }
        return htmlPlan(status: redirect.status, headers: headers + resource.extraHeaders, behavior: behavior)
    }

    /// Applies ``Behavior/rangeStartShift`` and ``Behavior/maxPartialLength`` to a satisfiable range.
    private func adjust(_ range: ClosedRange<Int64>, length: Int64, behavior: Behavior) -> ClosedRange<Int64> {
        var first = range.lowerBound
        var last = range.upperBound
        if behavior.rangeStartShift != 0 {
            let (shifted, overflow) = first.addingReportingOverflow(behavior.rangeStartShift)
            let target = overflow ? (behavior.rangeStartShift > 0 ? Int64.max : 0) : shifted
            first = min(max(0, target), length - 1)
            last = max(last, first)
        }
        if let maxLength = behavior.maxPartialLength {
            let (end, overflow) = first.addingReportingOverflow(max(1, maxLength) - 1)
            if !overflow { last = min(last, end) }
        }
        return first...last
    }

    /// A plan with a body, `Content-Length` or chunked framing, and the behavior's transfer settings.
    private func bodyPlan(
        status: Int,
        behavior: Behavior,
        date: String?,
        leading: [HeaderField],
        trailing: [HeaderField],
        parts: [ResponsePlan.BodyPart]
    ) -> ResponsePlan {
        var plan = ResponsePlan(status: status, headers: [])
        plan.parts = parts
        var headers = [HeaderField("Date", date ?? HTTPDate.now())] + leading
        if let override = behavior.contentLengthOverride {
            headers.append(HeaderField("Content-Length", override))
        } else if !behavior.chunked {
            headers.append(HeaderField("Content-Length", String(plan.bodyLength)))
        }
        if behavior.chunked { headers.append(HeaderField("Transfer-Encoding", "chunked")) }
        plan.headers = headers + trailing
        plan.chunked = behavior.chunked
        plan.includesBody = !isHead && !HTTPStatus.forbidsBody(status)
        plan.dropAfterBytes = behavior.dropAfterBytes ?? configuration.dropAfterBytes
        plan.resetOnDrop = behavior.resetOnDrop
        plan.throttleBytesPerSecond = behavior.throttleBytesPerSecond ?? configuration.throttleBytesPerSecond
        plan.interim = behavior.interimResponses
        plan.gate = behavior.gate
        plan.keepAlive =
            configuration.keepAlive && requestAllowsKeepAlive && plan.dropAfterBytes == nil
            && behavior.contentLengthOverride == nil
        return plan
    }

    /// Whether the request lets the connection stay open: HTTP/1.1, no `Connection: close`, and no request body
    /// (which the server never reads).
    private var requestAllowsKeepAlive: Bool {
        let connection = head.header("Connection")?.lowercased() ?? ""
        return head.version == "HTTP/1.1" && !connection.contains("close")
            && head.header("Content-Length") == nil && head.header("Transfer-Encoding") == nil
    }

    /// A small `text/html` page for `status`.
    private func htmlPlan(status: Int, headers: [HeaderField], behavior: Behavior, date: String? = nil)
        -> ResponsePlan
    {
        let body = HTTPStatus.forbidsBody(status) ? [] : HTTPStatus.htmlBody(for: status)
        var pageBehavior = behavior
        pageBehavior.chunked = false
        return bodyPlan(
            status: status, behavior: pageBehavior, date: date,
            leading: [HeaderField("Content-Type", "text/html")], trailing: headers,
            parts: [.literal(body)])
    }
}
