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
