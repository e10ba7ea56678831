#if canImport(Glibc)
import Glibc
#endif
import QuicTransport

/// Parses `HOST:PORT`, with IPv6 hosts in brackets (`[::1]:443`); nil when there is no port.
public func parseHostPort(_ text: String) -> (host: String, port: UInt16)? {
    guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else { return nil }
    let host = String(text[..<colon].trimming { $0 == "[" || $0 == "]" })
    return host.isEmpty ? nil : (host, port)
}

/// Whether `host` is a numeric IPv4 or IPv6 address rather than a name.
public func isNumericAddress(_ host: String) -> Bool {
    var v4 = in_addr()
    var v6 = in6_addr()
    return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
}
