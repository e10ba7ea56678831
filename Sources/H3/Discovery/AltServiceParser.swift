
/// A hand-written parser for RFC 7838 §3 (Alt-Svc is not a structured field):
///
///     Alt-Svc = clear / 1#alt-value
///     alt-value = alternative *( OWS ";" OWS parameter )
///     alternative = protocol-id "=" alt-authority
///     alt-authority = quoted-string   ; [ uri-host ] ":" port
///     parameter = token "=" ( token / quoted-string )
struct AltServiceParser {
    private let bytes: [UInt8]
    private var index = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    mutating func parseFieldValue() throws -> AltServiceFieldValue {
        skipWhitespace()
        if rest == Array("clear".utf8) { return .clear }
        var alternatives: [AltService] = []
        while true {
            skipWhitespace()
            // Empty list elements are allowed by the #rule (RFC 9110 §5.6.1).
            if peek == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard index < bytes.count else { break }
            alternatives.append(try parseAlternative())
            skipWhitespace()
            guard index < bytes.count else { break }
            guard peek == UInt8(ascii: ",") else { throw error("expected ',' between alternatives") }
            index += 1
        }
        guard !alternatives.isEmpty else { throw error("no alternative") }
        return .alternatives(alternatives)
    }

    private mutating func parseAlternative() throws -> AltService {
        let rawProtocol = try token("protocol-id")
        guard let protocolID = percentDecode(rawProtocol) else { throw error("bad percent-encoding in protocol-id") }
        guard peek == UInt8(ascii: "=") else { throw error("expected '=' after protocol-id") }
        index += 1
        let authority = try quotedString("alt-authority")
        let (host, port) = try parseAuthority(authority)
        var service = AltService(protocolID: protocolID, host: host, port: port)
        while true {
            skipWhitespace()
            guard peek == UInt8(ascii: ";") else { break }
            index += 1
            skipWhitespace()
            // A trailing ';' before ',' or the end is tolerated.
            if index >= bytes.count || peek == UInt8(ascii: ",") { break }
            let name = try token("parameter name").lowercased()
            skipWhitespace()
            guard peek == UInt8(ascii: "=") else { throw error("expected '=' after parameter \(name)") }
            index += 1
            skipWhitespace()
            let value = peek == UInt8(ascii: "\"") ? try quotedString("parameter value") : try token("parameter value")
            switch name {
            case "ma":
                guard !value.isEmpty, value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
                    throw error("ma must be a number of seconds")
                }
                // delta-seconds larger than we can hold saturate (RFC 9111 §1.2.2).
                service.maxAge = UInt64(value) ?? UInt64.max
            case "persist":
                service.persist = value == "1"
            default:
                continue  // Unknown parameters are ignored (RFC 7838 §3).
            }
        }
        return service
    }

    private func parseAuthority(_ text: String) throws -> (String?, UInt16) {
        guard let colon = text.lastIndex(of: ":") else { throw error("alt-authority needs ':port'") }
        var host = String(text[..<colon])
        let portText = text[text.index(after: colon)...]
        guard !portText.isEmpty, portText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let port = UInt16(portText), port > 0 else {
            throw error("invalid port '\(portText)' in alt-authority")
        }
        if host.hasPrefix("[") {
            guard host.hasSuffix("]"), host.count > 2 else { throw error("unterminated IPv6 literal in alt-authority") }
            host = String(host.dropFirst().dropLast())
        } else if host.contains(":") {
            throw error("an IPv6 host must be in brackets")
        }
        // By byte: a combining mark after a space would make one Character of the two.
        if host.utf8.contains(where: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "\"") }) {
            throw error("invalid host in alt-authority")
        }
        return (host.isEmpty ? nil : host, port)
    }

    // MARK: Lexing (RFC 9110 §5.6)

    private var peek: UInt8? { index < bytes.count ? bytes[index] : nil }
    private var rest: [UInt8] { Array(bytes[index...]).trimmingTrailingWhitespace }

    private mutating func skipWhitespace() {
        while let byte = peek, byte == 0x20 || byte == 0x09 { index += 1 }
    }

    private static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }

    private mutating func token(_ what: String) throws -> String {
        let start = index
        while let byte = peek, Self.isTokenCharacter(byte) { index += 1 }
        guard index > start else { throw error("expected a \(what)") }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    private mutating func quotedString(_ what: String) throws -> String {
        guard peek == UInt8(ascii: "\"") else { throw error("expected a quoted \(what)") }
        index += 1
        var out: [UInt8] = []
        while let byte = peek {
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(decoding: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                // quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text ) (RFC 9110 §5.6.4).
                guard let escaped = peek else { throw error("unterminated escape in \(what)") }
                if escaped != 0x09 && (escaped < 0x20 || escaped == 0x7f) { throw error("escaped control character in \(what)") }
                out.append(escaped)
                index += 1
            case 0x00...0x08, 0x0a...0x1f, 0x7f:
                throw error("control character in \(what)")
            default:
                out.append(byte)
            }
        }
        throw error("unterminated quoted \(what)")
    }

    private func percentDecode(_ text: String) -> String? {
        let utf8 = Array(text.utf8)
        var out: [UInt8] = []
        var position = 0
        while position < utf8.count {
            if utf8[position] == UInt8(ascii: "%") {
                guard position + 2 < utf8.count, let value = UInt8(String(decoding: utf8[(position + 1)...(position + 2)], as: UTF8.self), radix: 16) else {
                    return nil
                }
                out.append(value)
                position += 3
            } else {
                out.append(utf8[position])
                position += 1
            }
        }
        return String(validating: out, as: UTF8.self)
    }

    private func error(_ reason: String) -> AltServiceParseError {
        AltServiceParseError(reason: reason, offset: index)
    }
}

extension Array where Element == UInt8 {
    fileprivate var trimmingTrailingWhitespace: [UInt8] {
        var copy = self
        while let last = copy.last, last == 0x20 || last == 0x09 { copy.removeLast() }
        return copy
    }
}
