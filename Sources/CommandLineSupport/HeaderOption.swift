import Foundation

/// A `-H "Name: value"` option as curl reads it: split at the first colon, both sides trimmed;
/// nil without a colon or a name. Whether the name is a valid field name is the caller's check.
public func parseHeaderOption(_ text: String) -> (name: String, value: String)? {
    guard let colon = text.firstIndex(of: ":") else { return nil }
    let name = text[..<colon].trimmingCharacters(in: .whitespaces)
    let value = text[text.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    return name.isEmpty ? nil : (name, value)
}
