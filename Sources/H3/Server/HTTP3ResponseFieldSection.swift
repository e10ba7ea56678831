import CQuicShims
import HTTPTypes

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
