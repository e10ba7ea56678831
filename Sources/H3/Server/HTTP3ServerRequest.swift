#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

/// A request as the handler sees it: the head at once, the body as it arrives.
public struct HTTP3ServerRequest: Sendable {
    /// The request head: method, scheme, authority, path and header fields. For a request the
    /// server received, it is built from the field section the first time it is read, and kept.
    public var head: HTTPRequest { source.head }
    /// The request body; reading it is what lets the client send more (QUIC flow control).
    public let body: HTTP3RequestBody
    /// The QUIC stream that carries it (RFC 9114 §4.1).
    public let streamID: Int64
    /// The head, or the field section it is built from.
    let source: HTTP3RequestHeadSource
    /// The connection's version and client address, shared by all its requests; nil for a
    /// request made with the public initializer.
    let origin: HTTPServerRequestOrigin?

    /// The HTTP version that carried the request, as an access log writes it: `HTTP/3`,
    /// `HTTP/2.0` or `HTTP/1.1` (RFC 9114, RFC 9113, RFC 9112). A request made with the
    /// public initializer says `HTTP/3`.
    public var protocolVersion: String { origin?.protocolVersion ?? HTTPServerRequestOrigin.http3 }
    /// The client's IP address, without its port, as the connection first came from; nil
    /// when unknown (a request made with the public initializer).
    public var remoteAddress: String? { origin?.remoteAddress }
    /// The client's address and port, as NIO gives a channel's `remoteAddress`: for frameworks
    /// built on NIO (Vapor's `Request.remoteAddress`, Hummingbird's request context). nil when
    /// unknown.
    public var remoteSocketAddress: SocketAddress? { origin?.remoteSocketAddress }
    /// The server's address and port that the request came to; nil when unknown.
    public var localSocketAddress: SocketAddress? { origin?.localSocketAddress }
    /// The event loop of the connection that carried the request, where its handler runs
    /// (Vapor's `Request.eventLoop`); nil for a request made with the public initializer.
    public var eventLoop: (any EventLoop)? { origin?.eventLoop }

    /// The request method (RFC 9110 §9), read without building ``head``.
    public var method: HTTPRequest.Method { source.method }
    /// The `:path` pseudo-header field (RFC 9114 §4.3.1), read without building ``head``.
    public var path: String? { source.path }

    /// The `:authority` pseudo-header field (RFC 9114 §4.3.1), read without building ``head``.
    public var authority: String? { source.authority }

    /// Calls `body` with each header field (not the pseudo-header fields) in the order the
    /// client sent them, names in lower case (RFC 9114 §4.2), without building ``head``: for an
    /// adapter that copies the fields into its framework's own type, which `HTTPFields`, with
    /// its index and its second check of every value, would only slow down.
    public func forEachHeaderField(_ body: (_ name: String, _ value: String) -> Void) {
        source.forEachHeaderField(body)
    }

    /// A header field's value as `HTTPFields` gives it (repeated fields joined by commas), read
    /// without building ``head``: a responder that looks at one or two fields skips the work
    /// of the whole head.
    public func headerField(_ name: HTTPField.Name) -> String? { source[name] }

    /// The priority the client asked for in the `priority` field (RFC 9218 §5), or the default.
    public var priority: HTTPPriority {
        source[.priority].map(HTTPPriority.init(fieldValue:)) ?? .default
    }

    /// A request with a complete body, for handlers called directly (tests, composition).
    public init(head: HTTPRequest, body: [UInt8] = [], streamID: Int64 = 0, trailers: HTTPFields? = nil) {
        self.init(head: head, body: body, streamID: streamID, trailers: trailers, origin: nil)
    }

    /// A request with a complete body that came over `origin` (the TCP server's).
    init(head: HTTPRequest, body: [UInt8], streamID: Int64 = 0, trailers: HTTPFields?, origin: HTTPServerRequestOrigin?) {
        self.source = HTTP3RequestHeadSource(head)
        self.body = HTTP3RequestBody(complete: body, trailers: trailers)
        self.streamID = streamID
        self.origin = origin
    }

    init(source: HTTP3RequestHeadSource, body: HTTP3RequestBody, streamID: Int64, origin: HTTPServerRequestOrigin? = nil) {
        self.source = source
        self.body = body
        self.streamID = streamID
        self.origin = origin
    }
}
