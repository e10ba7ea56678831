import CQuicShims
import HTTPTypes
import Synchronization

/// Where an `HTTP3ServerRequest`'s head comes from: an `HTTPRequest` the caller built, or the
/// field section as nghttp3 decoded it, turned into an `HTTPRequest` only when someone asks
/// for one.
///
/// Building an `HTTPRequest` validates every name and value again (nghttp3 has checked them,
/// RFC 9114 §4.2) and allocates its field storage: with its teardown, more than nghttp3
/// spends decoding the section. `HTTP3FileHandler` reads only
/// the method, the path and `range`, which are read here from the section as it came.
///
/// The lazily built head is kept under a lock: handlers may read it from any thread.
final class HTTP3RequestHeadSource: Sendable {
    /// The field section in wire order (RFC 9114 §4.3: the pseudo-header fields first); empty
    /// when the head was built by the caller.
    private let fields: HTTP3ReceivedFields
    /// The head the caller built, if it did.
    private let built: HTTPRequest?
    private let lazyHead = Mutex<HTTPRequest?>(nil)
    /// The request method (RFC 9114 §4.3.1), read when the request arrived.
    let method: HTTPRequest.Method
    /// Where the `:path` pseudo-header field is in `fields`, found when the request arrived; its
    /// string is made only if asked for (the file handler reads the bytes).
    private let pathLine: HTTP3ReceivedFields.Line?

    init(_ head: HTTPRequest) {
        fields = HTTP3ReceivedFields()
        built = head
        method = head.method
        pathLine = nil
    }

    /// Nil when the section has no valid `:method` (RFC 9114 §4.3.1): a malformed request.
    init?(fields: HTTP3ReceivedFields) {
        guard let methodLine = fields.firstPseudoHeader(NGHTTP3_QPACK_TOKEN__METHOD),
              let method = fields.withValueBytes(of: methodLine, Self.method(from:))
        else { return nil }
        self.fields = fields
        self.built = nil
        self.method = method
        self.pathLine = fields.firstPseudoHeader(NGHTTP3_QPACK_TOKEN__PATH)
    }

    /// The `:path` pseudo-header field (RFC 9114 §4.3.1).
    var path: String? {
        if let built { return built.path }
        return pathLine.map(fields.value(of:))
    }

    /// The `:authority` pseudo-header field (RFC 9114 §4.3.1).
    var authority: String? {
        if let built { return built.authority }
        return fields.firstPseudoHeader(NGHTTP3_QPACK_TOKEN__AUTHORITY).map(fields.value(of:))
    }

    /// Runs `body` with each header field, not the pseudo-header fields, in the order it came:
    /// names in lower case (RFC 9114 §4.2), values as sent (nghttp3 has checked them). A name
    /// nghttp3 knows by its QPACK token is the table's constant, not a string decoded again.
    func forEachHeaderField(_ body: (_ name: String, _ value: String) -> Void) {
        if let built {
            for field in built.headerFields { body(field.name.canonicalName, field.value) }
            return
        }
        fields.forEachRegularLine { line, name, value in
            body(QPACKToken.name(of: line.token) ?? String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self))
        }
    }

    /// Runs `body` with the `:path` value's UTF-8 bytes; nil when the request has none.
    func withPathBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) -> R? {
        if let built {
            guard var path = built.path else { return nil }
            return path.withUTF8(body)
        }
        guard let pathLine else { return nil }
        return fields.withValueBytes(of: pathLine, body)
    }

    /// The method a `:method` value names: the common ones without making a string, the
    /// others as `HTTPRequest.Method` checks them (a token, RFC 9110 §9.1).
    private static func method(from bytes: UnsafeBufferPointer<UInt8>) -> HTTPRequest.Method? {
        if bytes.equals("GET") { return .get }
        if bytes.equals("HEAD") { return .head }
        if bytes.equals("POST") { return .post }
        return HTTPRequest.Method(String(decoding: bytes, as: UTF8.self))
    }

    /// The whole head, built from the section on first use and kept.
    var head: HTTPRequest {
        if let built { return built }
        return lazyHead.withLock { head in
            if let head { return head }
            let made = makeRequest()
            head = made
            return made
        }
    }

    /// A header field's value as `HTTPFields` gives it (repeated fields joined by commas,
    /// values legalized), read from the section without building the head.
    subscript(name: HTTPField.Name) -> String? {
        if let built { return built.headerFields[name] }
        // Most fields asked for are absent (`range`, for one): ruled out before any search.
        guard fields.mayContain(name.canonicalName) else { return nil }
        let lines = fields.lines(named: name.canonicalName)
        switch lines.count {
        case 0:
            return nil
        case 1:
            // Legalized as a field of its own; nothing to join.
            return HTTPField(name: name, value: fields.value(of: lines[0])).value
        default:
            var matching = HTTPFields()
            for line in lines { matching.append(HTTPField(name: name, value: fields.value(of: line))) }
            return matching[name]
        }
    }

    /// The request head from the field section, around the method and path read on arrival:
    /// the regular fields go straight into the head, and the first of a repeated
    /// pseudo-header field counts.
    private func makeRequest() -> HTTPRequest {
        HTTPRequest(
            method: method,
            scheme: fields.firstPseudoHeader(NGHTTP3_QPACK_TOKEN__SCHEME).map(fields.value(of:)),
            authority: authority,
            path: path,
            headerFields: HTTPFields(fields)
        )
    }
}
