import H3
import HTTPTypes
import Logging
import NIOCore
import NIOHTTP1
import Vapor

/// Answers HTTP/3 requests with a Vapor application: each request becomes a Vapor `Request` on
/// its QUIC connection's event loop, goes through the application's responder (middleware,
/// router, `ErrorMiddleware`), and the `Response` goes back on the request's stream.
///
/// A handler's error therefore becomes whatever the application's `ErrorMiddleware` makes of it,
/// and only that request's stream carries it: the connection and its other requests go on.
///
/// The body reaches the route collected, up to the configured limit (413 beyond it, as Vapor
/// answers a `.collect` route over TCP), except for routes marked
/// ``Vapor/Route/streamsHTTP3RequestBody()``, which read it as it arrives.
struct HTTP3VaporResponder: Sendable {
    let application: Application
    /// The application's responder, made once when the server starts, as Vapor's HTTP server
    /// makes it once (`app.responder.current` builds the router anew at each call).
    let responder: any Responder
    /// The routes marked to take their body streamed.
    let streamedBodyRoutes: HTTP3StreamedBodyRoutes
    /// The largest body collected for the other routes.
    let maximumBodySize: Int
    /// The `Date` field of every response, as Vapor's HTTP/1.1 encoder adds it.
    let dates = HTTPDateField()
    /// The application's allocator, read once: `Application.allocator` looks it up in the
    /// application's storage at each read.
    let allocator: ByteBufferAllocator
    /// The application's logger with a ``DeferredMetadataLogHandler``, made once and copied for
    /// each request: Vapor sets `request-id` on a request's logger, which the handler holds
    /// beside the application's until a message is written, rather than rendering it into it.
    let requestLogger: Logger

    init(application: Application, responder: any Responder) {
        self.application = application
        self.responder = responder
        self.streamedBodyRoutes = HTTP3StreamedBodyRoutes(routes: application.routes)
        self.maximumBodySize = (application.http3.configuration.maximumBodySize ?? application.routes.defaultMaxBodySize).value
        self.allocator = application.allocator
        var requestLogger = application.logger
        requestLogger.handler = DeferredMetadataLogHandler(base: requestLogger.handler)
        self.requestLogger = requestLogger
    }

    /// The HTTP version Vapor's request says: 3.0 (RFC 9114).
    static let version = HTTPVersion(major: 3, minor: 0)

    /// The field name that `name`, as a Vapor response spells it, stands for; nil when it is no
    /// token. The names Vapor's own responses carry are matched as written: `HTTPField.Name(_:)`
    /// checks every character and makes a lower-cased copy of a name like `Content-Length`.
    static func fieldName(_ name: String) -> HTTPField.Name? {
        switch name {
        case "Content-Length", "content-length": .contentLength
        case "Content-Type", "content-type": .contentType
        case "ETag", "etag": .eTag
        case "Last-Modified", "last-modified": .lastModified
        default: HTTPField.Name(name)
        }
    }

    /// Whether a field, by its lower-case name, is specific to an HTTP/1.1 connection and so
    /// malformed in HTTP/3 (RFC 9114 §4.2). A switch: a set would hash every name it is asked.
    static func isConnectionSpecific(_ canonicalName: String) -> Bool {
        // By length first: most names are none of these lengths, and need no comparison.
        switch canonicalName.utf8.count {
        case 7, 10, 16, 17: break
        default: return false
        }
        switch canonicalName {
        case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade": return true
        default: return false
        }
    }

    /// Answers a request that ended with its head (a GET, say) without a task: it goes through
    /// Vapor's responder as Vapor's own HTTP/1.1 server sends it, futures on the connection's
    /// loop, and Vapor's future completes `promise`. Requests with a body go to ``respond(to:)``,
    /// which reads it first; false passes them on.
    func respondWithoutTask(to h3Request: HTTP3ServerRequest, completing promise: HTTP3ResponsePromise) -> Bool {
        guard h3Request.body.endedWithHead, let eventLoop = h3Request.eventLoop else { return false }
        let (request, context) = vaporRequest(from: h3Request, target: target(of: h3Request), body: ByteBuffer(), on: eventLoop)
        answer(request, context: context, isHead: h3Request.method == .head, bodyTooLarge: false, on: eventLoop, reply: promise.complete(with:))
        return true
    }

    /// Answers any request, reading its body first (streamed, for the routes marked so).
    func respond(to h3Request: HTTP3ServerRequest) async throws -> HTTP3ServerResponse {
        let eventLoop = h3Request.eventLoop ?? application.eventLoopGroup.any()
        let target = target(of: h3Request)
        let body: ByteBuffer?
        if target.streamsBody {
            body = ByteBuffer()
        } else {
            let declaredLength = h3Request.headerField(.contentLength).flatMap { Int($0) }
            body = try await Self.collect(h3Request.body, limit: maximumBodySize, declaredLength: declaredLength)
        }
        let (request, context) = vaporRequest(from: h3Request, target: target, body: body, on: eventLoop)
        return try await withCheckedThrowingContinuation { continuation in
            answer(request, context: context, isHead: h3Request.method == .head, bodyTooLarge: body == nil, on: eventLoop) {
                continuation.resume(with: $0)
            }
        }
    }

    /// What a request asks for, in Vapor's terms, and whether its route reads the body streamed.
    struct Target {
        let method: HTTPMethod
        /// The request target as Vapor's HTTP/1.1 decoder takes it: path and query, unparsed.
        let url: URI
        let streamsBody: Bool
    }

    /// The target of `h3Request`, made once: `URI(path:)` goes through Foundation's
    /// `URLComponents`, some 7k instructions. A request that ended with its head has no body to
    /// stream, and its route is not looked up for one.
    func target(of h3Request: HTTP3ServerRequest) -> Target {
        let method = HTTPMethod(rawValue: h3Request.method.rawValue)
        let url = URI(path: h3Request.path ?? "/")
        let streamsBody = !h3Request.body.endedWithHead && streamedBodyRoutes.streamsBody(method: method, path: url.path)
        return Target(method: method, url: url, streamsBody: streamsBody)
    }

    /// Vapor's request for `h3Request`, with `body` collected (nil when it was over the limit),
    /// and the HTTP/3 context it carries (`Request.http3`).
    func vaporRequest(
        from h3Request: HTTP3ServerRequest, target: Target, body: ByteBuffer?, on eventLoop: any EventLoop
    ) -> (Request, HTTP3RequestContext) {
        // Straight from the field section into Vapor's type: an `HTTPRequest` in between
        // (`h3Request.head`) would index and check every field again, for nothing Vapor reads.
        // All at once: `HTTPHeaders.add` checks each name is ASCII, which nghttp3 made sure of
        // (RFC 9114 §4.2: it drops a field whose name is not a lower-case token).
        var fields: [(String, String)] = []
        fields.reserveCapacity(8)
        var hasHost = false
        h3Request.forEachHeaderField { name, value in
            if name == "host" { hasHost = true }
            fields.append((name, value))
        }
        // HTTP/3 carries the authority in `:authority` (RFC 9114 §4.3.1); Vapor reads `Host`.
        if !hasHost, let authority = h3Request.authority { fields.append(("host", authority)) }
        let headers = HTTPHeaders(fields)
        let request = Request(
            application: application,
            method: target.method,
            url: target.url,
            version: Self.version,
            headersNoUpdate: headers,
            collectedBody: body.flatMap { $0.readableBytes > 0 ? $0 : nil },
            remoteAddress: h3Request.remoteSocketAddress,
            logger: requestLogger,
            byteBufferAllocator: allocator,
            on: eventLoop
        )
        let context = HTTP3RequestContext(
            clientPriority: h3Request.priority, streamID: h3Request.streamID, body: h3Request.body, streamsBody: target.streamsBody)
        request.http3 = context
        return (request, context)
    }

    /// What HTTP/3 sends for Vapor's answer to a request: the response, or the error it failed with.
    typealias Reply = @Sendable (Result<HTTP3ServerResponse, any Error>) -> Void

    /// Vapor's response to `request`, as an HTTP/3 one, handed to `reply`; `bodyTooLarge`,
    /// Vapor's 413. `isHead`: the request as the client sent it was a HEAD, whose response
    /// carries no content (RFC 9110 §9.3.2), as Vapor's HTTP/1.1 encoder judges by the request
    /// it decoded rather than by `Request.method`.
    func answer(
        _ request: Request, context: HTTP3RequestContext, isHead: Bool, bodyTooLarge: Bool, on eventLoop: any EventLoop,
        reply: @escaping Reply
    ) {
        let vaporResponse: EventLoopFuture<Response>
        if bodyTooLarge {
            // Larger than the limit: Vapor's own answer to a `.collect` route over TCP, through
            // the application's middleware so that its ErrorMiddleware shapes it.
            let tooLarge = application.middleware.resolve().makeResponder(chainingTo: FailingResponder(error: Abort(.payloadTooLarge)))
            vaporResponse = tooLarge.respond(to: request)
        } else {
            vaporResponse = responder.respond(to: request)
        }
        let date = dates.current
        // Vapor's future hands its result straight on: most responses hold their body, and a
        // second future here would only pass the first one's result along.
        vaporResponse.whenComplete { result in
            switch result {
            case .success(let response):
                Self.complete(with: response, isHead: isHead, context: context, date: date, on: eventLoop, reply: reply)
            case .failure(let error):
                reply(.failure(error))
            }
        }
    }

    /// Reads the body as QUIC delivers it, which is what opens the client's flow control
    /// window; nil once it grows past `limit` (the rest is not read).
    static func collect(_ body: HTTP3RequestBody, limit: Int, declaredLength: Int?) async throws -> ByteBuffer? {
        if let declaredLength, declaredLength > limit { return nil }
        var buffer = ByteBuffer()
        if let declaredLength { buffer.reserveCapacity(declaredLength) }
        for try await chunk in body {
            guard buffer.readableBytes + chunk.count <= limit else { return nil }
            buffer.writeBytes(chunk)
        }
        return buffer
    }

    /// Replies with the Vapor response as an HTTP/3 one, once its body is at hand: the one it
    /// holds, or else collected from its stream, except for a HEAD request's and for a stream
    /// written as QUIC takes it.
    static func complete(
        with response: Response, isHead: Bool, context: HTTP3RequestContext, date: HTTPField, on eventLoop: any EventLoop,
        reply: @escaping Reply
    ) {
        // Each of Vapor's accessors takes a lock and copies: read once.
        let body = response.body
        let streaming = body.count == -1 ? response.storage[HTTP3StreamingBodyKey.self] : nil
        let held = body.buffer
        guard !isHead, streaming == nil, held == nil, body.count != 0 else {
            reply(.success(http3Response(from: response, body: held, streaming: streaming, isHead: isHead, context: context, date: date)))
            return
        }
        body.collect(on: eventLoop).whenComplete { result in
            reply(result.map { collected in
                http3Response(from: response, body: collected, streaming: nil, isHead: false, context: context, date: date)
            })
        }
    }

    /// The Vapor response as an HTTP/3 one: status, header fields without the connection-specific
    /// ones, `date` unless the handler set one (RFC 9110 §6.6.1), the body (none for a HEAD
    /// request, RFC 9110 §9.3.2), the handler's priority override and trailers.
    static func http3Response(
        from response: Response, body: ByteBuffer?, streaming: HTTP3StreamingBody?, isHead: Bool, context: HTTP3RequestContext, date: HTTPField
    ) -> HTTP3ServerResponse {
        let headers = response.headers
        var fields = HTTPFields()
        fields.reserveCapacity(headers.count + 1)
        var hasDate = false
        for (name, value) in headers {
            // The name's canonical form is lower case already: no second lower-cased copy.
            guard let fieldName = Self.fieldName(name), !isConnectionSpecific(fieldName.canonicalName) else { continue }
            if fieldName == .date { hasDate = true }
            fields.append(HTTPField(name: fieldName, value: value))
        }
        if !hasDate { fields.append(date) }
        // HTTP/3 sends no reason phrase (RFC 9114 §4.3.2): the code is all it needs.
        let head = HTTPResponse(status: HTTPResponse.Status(code: Int(response.status.code)), headerFields: fields)
        var http3Response = HTTP3ServerResponse(head: head)
        if isHead {
            // No content.
        } else if let streaming {
            // Written as QUIC takes it; a middleware that replaced the body made it no stream.
            http3Response = HTTP3ServerResponse(head: head) { writer in
                try await streaming.write(HTTP3VaporBodyWriter(writer: writer))
            }
        } else if let body {
            // As it is, whatever its size: HTTP/3 sends the bytes from the buffer itself as QUIC
            // takes them. Copied into an array, a 1 KiB body cost 3.5k instructions, an
            // allocation too large for glibc's per-thread cache among them; and a large one went
            // in 256 KiB pieces, each a copy, through a stream.
            http3Response.bodyBuffer = body
        }
        (http3Response.priority, http3Response.trailers) = context.handlerSettings
        return http3Response
    }
}

/// A responder that fails with one error, for middleware to turn into a response.
struct FailingResponder: Responder {
    let error: any Error

    func respond(to request: Request) -> EventLoopFuture<Response> {
        request.eventLoop.makeFailedFuture(error)
    }
}
