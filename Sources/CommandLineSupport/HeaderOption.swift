import QuicTransport

/// A `-H "Name: value"` option as curl reads it: split at the first colon, both sides trimmed;
/// nil without a colon or a name. Whether the name is a valid field name is the caller's check.
public func parseHeaderOption(_ text: String) -> (name: String, value: String)? {
    guard let colon = text.firstIndex(of: ":") else { return nil }
    let name = String(text[..<colon].trimmingASCIIWhitespace())
    let value = String(text[text.index(after: colon)...].trimmingASCIIWhitespace())
    return name.isEmpty ? nil : (name, value)
}
