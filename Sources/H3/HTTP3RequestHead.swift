import HTTPTypes
import Synchronization

/// Where an `HTTP3ServerRequest`'s head comes from: an `HTTPRequest` the caller built, or the
/// field section as nghttp3 decoded it, turned into an `HTTPRequest` only when someone asks
/// for one.
///
/// Building an `HTTPRequest` validates every name and value again (nghttp3 has checked them,
/// RFC 9114 §4.2) and allocates its field storage: about 4k instructions per request with
/// its teardown, more than nghttp3 spends decoding the section. `HTTP3FileHandler` reads only
/// the method, the path and `range`, which are read here from the section as it came.
///
/// The lazily built head is kept under a lock: handlers may read it from any thread.
final class HTTP3RequestHeadSource: Sendable {
    /// The field section in wire order (RFC 9114 §4.3: the pseudo-header fields first); empty
    /// when the head was built by the caller.
    private let fields: [(name: String, value: String)]
    /// The head the caller built, if it did.
    private let built: HTTPRequest?
    private let lazyHead = Mutex<HTTPRequest?>(nil)
    /// The request method and the `:path` pseudo-header field (RFC 9114 §4.3.1), read when the
    /// request arrived.
    let method: HTTPRequest.Method
    let path: String?

    init(_ head: HTTPRequest) {
        fields = []
        built = head
        method = head.method
        path = head.path
    }

    /// Nil when the section has no valid `:method` (RFC 9114 §4.3.1): a malformed request.
    init?(fields: [(name: String, value: String)]) {
        var methodText: String?
        var path: String?
        // The pseudo-header fields come first (§4.3), and the first of a repeated one counts.
        for field in fields {
            guard field.name.utf8.first == UInt8(ascii: ":") else { break }
            switch field.name {
            case ":method" where methodText == nil: methodText = field.value
            case ":path" where path == nil: path = field.value
            default: break
            }
        }
        guard let methodText, let method = HTTPRequest.Method(methodText) else { return nil }
        self.fields = fields
        self.built = nil
        self.method = method
        self.path = path
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
        var matching = HTTPFields()
        for field in fields where field.name == name.canonicalName {
            matching.append(HTTPField(name: name, value: field.value))
        }
        return matching.isEmpty ? nil : matching[name]
    }

    /// The request head from the field section, around the method and path read on arrival:
    /// the regular fields go straight into the head, and the first of a repeated
    /// pseudo-header field counts.
    private func makeRequest() -> HTTPRequest {
        var scheme: String?
        var authority: String?
        var headerFields = HTTPFields()
        headerFields.reserveCapacity(fields.count)
        for (name, value) in fields {
            guard name.utf8.first == UInt8(ascii: ":") else {
                if let fieldName = HTTPField.Name(name) { headerFields.append(HTTPField(name: fieldName, value: value)) }
                continue
            }
            switch name {
            case ":scheme" where scheme == nil: scheme = value
            case ":authority" where authority == nil: authority = value
            default: break
            }
        }
        return HTTPRequest(method: method, scheme: scheme, authority: authority, path: path, headerFields: headerFields)
    }
}
