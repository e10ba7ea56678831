/// curl's `--write-out` text for one transfer: each `%{name}` replaced by its value, each
/// `%header{name}` by that response header field's value (empty when absent), `%%` by `%`,
/// and `\n`, `\r` and `\t` by a newline, a carriage return and a tab. One pass, so a value that
/// holds `%{…}` or a backslash is written as it is.
///
/// - Returns: the text, and the names it asked for that `values` lacks. As curl does, those
///   write nothing; the caller warns about them.
public func writeOutText(
    _ format: String, values: [String: String], header: (String) -> String? = { _ in nil }
) -> (text: String, unknown: [String]) {
    var text = ""
    var unknown: [String] = []
    var rest = Substring(format)
    while let character = rest.first {
        rest = rest.dropFirst()
        switch character {
        case "%" where rest.first == "%":
            text.append("%")
            rest = rest.dropFirst()
        case "%" where rest.first == "{":
            guard let close = rest.firstIndex(of: "}") else {
                text.append("%")  // No closing brace: the rest is literal.
                continue
            }
            let name = String(rest[rest.index(after: rest.startIndex)..<close])
            if let value = values[name] { text += value } else { unknown.append(name) }
            rest = rest[rest.index(after: close)...]
        case "%" where rest.hasPrefix("header{"):
            let nameStart = rest.index(rest.startIndex, offsetBy: "header{".count)
            guard let close = rest[nameStart...].firstIndex(of: "}") else {
                text.append("%")
                continue
            }
            text += header(String(rest[nameStart..<close])) ?? ""
            rest = rest[rest.index(after: close)...]
        case "\\" where rest.first == "n":
            text.append("\n")
            rest = rest.dropFirst()
        case "\\" where rest.first == "r":
            text.append("\r")
            rest = rest.dropFirst()
        case "\\" where rest.first == "t":
            text.append("\t")
            rest = rest.dropFirst()
        default:
            text.append(character)
        }
    }
    return (text, unknown)
}
