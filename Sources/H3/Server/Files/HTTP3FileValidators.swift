import QuicTransport

/// A served file's validators, made once when it is opened, and the preconditions of RFC 9110
/// §13 evaluated against them.
///
/// The entity tag is nginx's, `"<mtime-hex>-<size-hex>"`, strong (§8.8.3), with the content
/// coding after it for a precompressed sibling (`"…-br"`), so that each representation has its
/// own tag (§8.8.3.3). The modification time is whole seconds, as `Last-Modified` (§8.8.2) has
/// no finer resolution.
struct HTTP3FileValidators: Sendable {
    /// The `ETag` value, with its quotes.
    let entityTag: String
    /// Seconds since 1970 of the file's last change.
    let modified: Int
    /// The `Last-Modified` value, an IMF-fixdate.
    let lastModified: String

    init(modified: Int, size: Int, encoding: String? = nil) {
        self.modified = modified
        let suffix = encoding.map { "-" + $0 } ?? ""
        entityTag = "\"" + String(modified, radix: 16) + "-" + String(size, radix: 16) + suffix + "\""
        lastModified = HTTPDate.imfFixdate(modified)
    }

    /// What the preconditions of a GET or HEAD ask for (RFC 9110 §13.2.2).
    enum Outcome: Equatable {
        /// Serve the representation; a `Range` applies only when `honoursRange`.
        case proceed(honoursRange: Bool)
        /// 304: the client's copy is current (§15.4.5).
        case notModified
        /// 412: a precondition of a state-changing kind failed (§15.5.13).
        case preconditionFailed
    }

    /// Evaluates the conditional fields of a GET or HEAD in the order of RFC 9110 §13.2.2:
    /// If-Match, else If-Unmodified-Since; then If-None-Match, else If-Modified-Since; then
    /// If-Range for a range request. A date that does not parse makes its field ignored.
    func evaluate(
        ifMatch: String?, ifUnmodifiedSince: String?, ifNoneMatch: String?, ifModifiedSince: String?, ifRange: String?
    ) -> Outcome {
        if let ifMatch {
            // §13.1.1: the strong comparison, or `*` for any current representation.
            if !Self.listMatches(ifMatch, entityTag, weak: false) { return .preconditionFailed }
        } else if let ifUnmodifiedSince, let date = HTTPDate.seconds(parsing: Substring(ifUnmodifiedSince)) {
            if modified > date { return .preconditionFailed }  // §13.1.4
        }
        if let ifNoneMatch {
            // §13.1.2: the weak comparison; a match means the client holds this representation.
            if Self.listMatches(ifNoneMatch, entityTag, weak: true) { return .notModified }
        } else if let ifModifiedSince, let date = HTTPDate.seconds(parsing: Substring(ifModifiedSince)) {
            if modified <= date { return .notModified }  // §13.1.3
        }
        guard let ifRange else { return .proceed(honoursRange: true) }
        return .proceed(honoursRange: rangeConditionHolds(ifRange))
    }

    /// If-Range (RFC 9110 §13.1.5): an entity tag must match strongly (a weak one never does);
    /// a date must be the file's exact `Last-Modified`.
    func rangeConditionHolds(_ value: String) -> Bool {
        let value = value.trimmingASCIIWhitespace()
        if value.hasPrefix("\"") || value.hasPrefix("W/") { return value == entityTag }
        return HTTPDate.seconds(parsing: Substring(value)) == modified
    }

    /// Whether the field value `list` (`*` or entity tags separated by commas, §8.8.3) holds
    /// `tag`, compared weakly (`W/` ignored on either side) or strongly (§8.8.3.2).
    static func listMatches(_ list: String, _ tag: String, weak: Bool) -> Bool {
        if list.trimmingASCIIWhitespace() == "*" { return true }
        for candidate in entityTags(in: list) {
            let isWeak = candidate.hasPrefix("W/")
            if isWeak && !weak { continue }
            if (isWeak ? candidate.dropFirst(2) : candidate[...]) == tag[...] { return true }
        }
        return false
    }

    /// The entity tags of a list, each with its `W/` and quotes. The opaque part may hold
    /// commas (etagc, §8.8.3), so the list is split between quoted tags, not at every comma.
    static func entityTags(in list: String) -> [Substring] {
        var tags: [Substring] = []
        var rest = Substring(list)
        while let quote = rest.firstIndex(of: "\"") {
            let afterQuote = rest.index(after: quote)
            guard let close = rest[afterQuote...].firstIndex(of: "\"") else { break }
            let prefix = rest[..<quote]
            let isWeak = prefix.hasSuffix("W/")
            let start = isWeak ? rest.index(quote, offsetBy: -2) : quote
            tags.append(rest[start...close])
            rest = rest[rest.index(after: close)...]
        }
        return tags
    }
}
