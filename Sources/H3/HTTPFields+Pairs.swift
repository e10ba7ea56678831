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

    /// Fields from name and value pairs; names that are not valid field names are dropped.
    init(pairs: [(name: String, value: String)]) {
        self.init()
        for (name, value) in pairs {
            if let fieldName = HTTPField.Name(name) { append(HTTPField(name: fieldName, value: value)) }
        }
    }
}
