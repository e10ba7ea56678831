import HTTPTypes

extension HTTPFields {
    /// The fields as lower-case name and value pairs, the form HTTP/3 carries (RFC 9114 §4.2).
    var pairs: [(name: String, value: String)] { map { ($0.name.canonicalName, $0.value) } }

    /// Fields from name and value pairs; names that are not valid field names are dropped.
    init(pairs: [(name: String, value: String)]) {
        self.init()
        for (name, value) in pairs {
            if let fieldName = HTTPField.Name(name) { append(HTTPField(name: fieldName, value: value)) }
        }
    }
}
