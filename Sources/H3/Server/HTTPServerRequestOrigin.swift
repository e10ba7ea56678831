import NIOCore

/// What a connection tells its requests about itself: the HTTP version, the addresses of both
/// ends and the event loop that serves it. Made once per connection (per HTTP/1.1 connection
/// or HTTP/2 stream over TCP) and shared by its requests with one reference count, so a
/// request carries it at no cost.
final class HTTPServerRequestOrigin: Sendable {
    /// HTTP/3 (RFC 9114), as access logs write it.
    static let http3 = "HTTP/3"
    /// HTTP/2 (RFC 9113), as Apache and nginx log it.
    static let http2 = "HTTP/2.0"
    /// HTTP/1.1 (RFC 9112).
    static let http1 = "HTTP/1.1"

    let protocolVersion: String
    /// The client's IP address without its port, as access logs write it: formatted once here,
    /// not from `remoteSocketAddress` for each request the log writes.
    let remoteAddress: String?
    let remoteSocketAddress: SocketAddress?
    let localSocketAddress: SocketAddress?
    let eventLoop: any EventLoop

    init(protocolVersion: String, remote: SocketAddress?, local: SocketAddress?, eventLoop: any EventLoop) {
        self.protocolVersion = protocolVersion
        self.remoteAddress = remote?.ipAddress
        self.remoteSocketAddress = remote
        self.localSocketAddress = local
        self.eventLoop = eventLoop
    }
}
