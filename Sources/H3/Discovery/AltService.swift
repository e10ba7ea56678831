import QuicTransport

/// One alternative service from an `Alt-Svc` field (RFC 7838 §3): where else, and by which
/// protocol, the same origin can be reached.
public struct AltService: Hashable, Sendable, CustomStringConvertible {
    /// The ALPN protocol ID, percent-decoded (RFC 7838 §3.1), for example `h3`.
    public var protocolID: String
    /// The alternative host; nil means the origin's own host (`":443"`).
    public var host: String?
    /// The alternative port, always present in an `alt-authority` (RFC 7838 §3).
    public var port: UInt16
    /// Freshness in seconds (`ma`, RFC 7838 §3.1); 24 hours when absent.
    public var maxAge: UInt64
    /// Keep the entry across network changes (`persist=1`, RFC 7838 §3.1).
    public var persist: Bool

    /// The freshness used when `ma` is absent: 86,400 seconds, 24 hours (RFC 7838 §3.1).
    public static let defaultMaxAge: UInt64 = 86_400

    /// Creates an alternative; a nil `host` means the origin's own host.
    public init(protocolID: String, host: String? = nil, port: UInt16, maxAge: UInt64 = defaultMaxAge, persist: Bool = false) {
        self.protocolID = protocolID
        self.host = host
        self.port = port
        self.maxAge = maxAge
        self.persist = persist
    }

    /// The alternative as an `Alt-Svc` value: the protocol ID percent-encoded as RFC 7838 §3
    /// requires (every octet outside `tchar`, and `%`), the authority a quoted-string.
    public var description: String {
        let authority = (host.map(URIHost.bracketed) ?? "") + ":\(port)"
        // By scalar, not by Character: a combining mark after a backslash makes one Character
        // of the two, and the backslash then went out unescaped (found by the fuzzer).
        var quoted = ""
        for scalar in authority.unicodeScalars {
            if scalar == "\\" { quoted.unicodeScalars.append("\\") }
            quoted.unicodeScalars.append(scalar)
        }
        return "\(Self.percentEncoded(protocolID))=\"\(quoted)\"; ma=\(maxAge)" + (persist ? "; persist=1" : "")
    }

    /// `protocolID` as an RFC 7838 §3 protocol-id: `tchar` octets other than `%` as they are.
    private static func percentEncoded(_ protocolID: String) -> String {
        var out = ""
        for byte in protocolID.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case _ where Array("!#$&'*+-.^_`|~".utf8).contains(byte):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return out
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
