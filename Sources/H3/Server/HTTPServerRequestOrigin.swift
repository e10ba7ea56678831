/// What a connection tells its requests about itself: the HTTP version and the client's
/// address. Made once per connection (per HTTP/1.1 connection or HTTP/2 stream over TCP) and
/// shared by its requests with one reference count, so a request carries it at no cost.
final class HTTPServerRequestOrigin: Sendable {
    /// HTTP/3 (RFC 9114), as access logs write it.
    static let http3 = "HTTP/3"
    /// HTTP/2 (RFC 9113), as Apache and nginx log it.
    static let http2 = "HTTP/2.0"
    /// HTTP/1.1 (RFC 9112).
    static let http1 = "HTTP/1.1"

    let protocolVersion: String
    let remoteAddress: String?

    init(protocolVersion: String, remoteAddress: String?) {
        self.protocolVersion = protocolVersion
        self.remoteAddress = remoteAddress
    }
}
