/// A host as a URI's authority writes it (RFC 3986 §3.2.2): an IPv6 literal goes in brackets.
public enum URIHost {
    /// `host`, bracketed when it is an IPv6 literal: `::1` → `[::1]`, `example.com` as it is.
    public static func bracketed(_ host: String) -> String {
        host.contains(":") ? "[\(host)]" : host
    }

    /// `host:port` with an IPv6 literal bracketed: `[::1]:4433`, `127.0.0.1:4433`.
    public static func authority(_ host: String, _ port: UInt16) -> String {
        "\(bracketed(host)):\(port)"
    }
}
