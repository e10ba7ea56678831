import Vapor

extension Route {
    /// Over HTTP/3, hands this route the request body as QUIC delivers it, through
    /// `req.streamedBody`, instead of collecting it first; reading it is what lets the client
    /// send more (flow control).
    ///
    /// For routes declared with `body: .stream`: Vapor 4 does not record a route's body
    /// strategy where the bridge can read it, nor let anything outside its module build a
    /// request with a streamed body, so the route says it again here and reads
    /// `req.streamedBody`, which over TCP is Vapor's own streamed `req.body`.
    ///
    /// ```swift
    /// app.on(.POST, "upload", body: .stream) { req in
    ///     for try await chunk in req.streamedBody { … }
    /// }.streamsHTTP3RequestBody()
    /// ```
    @discardableResult
    public func streamsHTTP3RequestBody() -> Route {
        userInfo[HTTP3StreamedBodyRouteKey()] = true
        return self
    }

    /// Whether ``streamsHTTP3RequestBody()`` marked the route.
    var streamsHTTP3Body: Bool { userInfo[HTTP3StreamedBodyRouteKey()] as? Bool ?? false }
}

/// The `userInfo` key of routes that stream their HTTP/3 request body.
struct HTTP3StreamedBodyRouteKey: Hashable, Sendable {}
