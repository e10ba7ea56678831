import ArgumentParser
import HTTPTypes
import QuicTransport

/// A `-H "Name: value"` option as curl reads it: split at the first colon, both sides trimmed;
/// nil without a colon or a name. Whether the name is a valid field name is the caller's check.
public func parseHeaderOption(_ text: String) -> (name: String, value: String)? {
    guard let colon = text.firstIndex(of: ":") else { return nil }
    let name = String(text[..<colon].trimmingASCIIWhitespace())
    let value = String(text[text.index(after: colon)...].trimmingASCIIWhitespace())
    return name.isEmpty ? nil : (name, value)
}

/// `-H` options as request fields, each checked: a colon, and a name that is a token (RFC 9110
/// §5.1). The first bad one is a `ValidationError` that says what is wrong with it.
public func headerFields(fromOptions options: [String]) throws(ValidationError) -> [(name: HTTPField.Name, value: String)] {
    try options.map { (option: String) throws(ValidationError) -> (name: HTTPField.Name, value: String) in
        guard let (name, value) = parseHeaderOption(option) else { throw ValidationError("header '\(option)' is not \"Name: value\"") }
        guard let fieldName = HTTPField.Name(name) else { throw ValidationError("header '\(option)': '\(name)' is not a field name") }
        return (fieldName, value)
    }
}
