import CQuicShims
import HTTPTypes

extension HTTPFields {
    /// The fields as lower-case name and value pairs, the form HTTP/3 carries (RFC 9114 §4.2).
    var pairs: [(name: String, value: String)] { pairs(after: EmptyCollection()) }

    /// `leading` (the pseudo-header fields, which come first: RFC 9114 §4.3), then these fields
    /// as pairs, in one array grown once.
    func pairs(after leading: some Collection<(name: String, value: String)>) -> [(name: String, value: String)] {
        var all: [(name: String, value: String)] = []
        all.reserveCapacity(leading.count + count)
        all.append(contentsOf: leading)
        for field in self { all.append((field.name.canonicalName, field.value)) }
        return all
    }

    /// The regular fields of a received section, in order: the pseudo-header fields belong to
    /// the head (RFC 9114 §4.3), and names that are not valid field names are dropped.
    init(_ received: HTTP3ReceivedFields) {
        self.init()
        reserveCapacity(received.count)
        received.forEachRegularLine { line, name, value in
            guard let name = QPACKToken.fieldName(of: line.token) ?? HTTPField.Name(String(decoding: name, as: UTF8.self)) else { return }
            append(HTTPField(name: name, value: String(decoding: value, as: UTF8.self)))
        }
    }
}

/// A response's field section as HTTP/3 sends it (RFC 9114 §4.3.2): `:status` first, then the
/// fields as lower-case name and value pairs, read in place rather than copied into an array.
struct HTTP3ResponseFieldSection: RandomAccessCollection, HTTP3FieldArraySource {
    /// The head, read in place: its status code is parsed from its text only when the section
    /// is read field by field, which a prepared head skips.
    private let head: HTTP3ResponseHead

    init(_ head: HTTP3ResponseHead) {
        self.head = head
    }

    var response: HTTPResponse { head.response }

    var fields: HTTPFields { response.headerFields }

    func withFieldArray<R>(_ body: (UnsafePointer<nghttp3_nv>, Int) -> R) -> R {
        if case .prepared(let prepared) = head { return prepared.encoded.withFieldArray(body) }
        return withCopiedFieldArray(body)
    }

    var sharedFieldArray: HTTP3FieldArray? {
        if case .prepared(let prepared) = head { return prepared.encoded }
        return nil
    }

    var startIndex: Int { 0 }
    var endIndex: Int { fields.count + 1 }

    subscript(position: Int) -> (name: String, value: String) {
        guard position > 0 else { return (":status", Self.statusText(response.status.code)) }
        let field = fields[fields.index(fields.startIndex, offsetBy: position - 1)]
        return (field.name.canonicalName, field.value)
    }

    /// The common codes without formatting an integer.
    private static func statusText(_ code: Int) -> String {
        switch code {
        case 200: return "200"
        case 204: return "204"
        case 206: return "206"
        case 304: return "304"
        case 404: return "404"
        default: return String(code)
        }
    }
}

/// A response's head: one given (or changed) by a handler, or one made ahead of time.
enum HTTP3ResponseHead: Sendable {
    case given(HTTPResponse)
    /// Made and encoded once, shared by reference: copying the response then retains one
    /// object for its head, not the head's every part.
    case prepared(HTTP3PreparedHead)

    var response: HTTPResponse {
        switch self {
        case .given(let response): response
        case .prepared(let prepared): prepared.response
        }
    }
}

/// A response head made once and encoded once for HTTP/3, shared by every response that
/// carries it (a served file's 200, `HTTP3ServedFile`).
final class HTTP3PreparedHead: Sendable {
    let response: HTTPResponse
    let encoded: HTTP3FieldArray

    init(_ response: HTTPResponse) {
        self.response = response
        encoded = HTTP3FieldArray(HTTP3ResponseFieldSection(.given(response)))
    }
}
