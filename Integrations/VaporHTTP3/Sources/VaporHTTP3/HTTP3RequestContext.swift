import H3
import HTTPTypes
import Synchronization
import Vapor

/// What HTTP/3 adds to a Vapor request: its priority (RFC 9218), which a handler may override
/// for the response, its QUIC stream, and trailers both ways. `req.http3` is nil for requests
/// that came over TCP.
public final class HTTP3RequestContext: Sendable {
    /// The priority the client asked for in its `priority` field (RFC 9218 §5), or the default
    /// (urgency 3, not incremental).
    public let clientPriority: HTTPPriority
    /// The QUIC stream that carries the request (RFC 9114 §4.1).
    public let streamID: Int64
    /// The body as QUIC delivers it, for a route that streams it; nil when the bridge
    /// collected it into `req.body`.
    var streamedBody: HTTP3RequestBody? { streamsBody ? body : nil }
    /// Trailer fields the client sent after the body (RFC 9114 §4.1), nil when none; known
    /// once the body has ended.
    public var requestTrailers: HTTPFields? { body.trailers }
    private let body: HTTP3RequestBody
    private let streamsBody: Bool
    /// Held in the context itself: a lock box beside it would be a second allocation for every
    /// request.
    private let state = Mutex(State())

    private struct State {
        var priorityOverride: HTTPPriority?
        var responseTrailers: HTTPFields?
    }

    init(clientPriority: HTTPPriority, streamID: Int64, body: HTTP3RequestBody, streamsBody: Bool) {
        self.clientPriority = clientPriority
        self.streamID = streamID
        self.body = body
        self.streamsBody = streamsBody
    }

    /// The priority the response is sent with: the client's, until a handler sets another,
    /// which the server then uses instead (RFC 9218 §8: the server decides).
    public var priority: HTTPPriority {
        get { state.withLock { $0.priorityOverride } ?? clientPriority }
        set { state.withLock { $0.priorityOverride = newValue } }
    }

    /// The priority and the trailers a handler set, if any, read together for the response.
    var handlerSettings: (priority: HTTPPriority?, trailers: HTTPFields?) {
        state.withLock { ($0.priorityOverride, $0.responseTrailers) }
    }

    /// Trailer fields to send after the response body (RFC 9114 §4.1); Vapor's `Response` has
    /// no place for them.
    public var responseTrailers: HTTPFields? {
        get { state.withLock { $0.responseTrailers } }
        set { state.withLock { $0.responseTrailers = newValue } }
    }
}

extension Request {
    /// The HTTP/3 side of this request, nil when it came over TCP.
    public var http3: HTTP3RequestContext? {
        get { storage[HTTP3RequestContextKey.self] }
        set { storage[HTTP3RequestContextKey.self] = newValue }
    }
}

struct HTTP3RequestContextKey: StorageKey {
    typealias Value = HTTP3RequestContext
}
