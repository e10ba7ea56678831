import H3
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
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

    init(application: Application, responder: any Responder) {
        self.application = application
        self.responder = responder
        self.streamedBodyRoutes = HTTP3StreamedBodyRoutes(routes: application.routes)
        self.maximumBodySize = (application.http3.configuration.maximumBodySize ?? application.routes.defaultMaxBodySize).value
        self.allocator = application.allocator
    }

    /// The HTTP version Vapor's request says: 3.0 (RFC 9114).
    static let version = HTTPVersion(major: 3, minor: 0)

    /// Pieces of a large body sent as a stream, the server pulling each as QUIC makes room.
    static let responseChunkSize = 256 * 1024
    /// Bodies up to this size go in one piece.
    static let singlePieceLimit = 1 << 20

    /// Whether a field, by its lower-case name, is specific to an HTTP/1.1 connection and so
    /// malformed in HTTP/3 (RFC 9114 §4.2). A switch: a set would hash every name it is asked.
    static func isConnectionSpecific(_ canonicalName: String) -> Bool {
        switch canonicalName {
        case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade": true
        default: false
        }
    }

    func respond(to h3Request: HTTP3ServerRequest) async throws -> HTTP3ServerResponse {
        let eventLoop = h3Request.eventLoop ?? application.eventLoopGroup.any()
        // Straight from the field section into Vapor's type: an `HTTPRequest` in between
        // (`h3Request.head`) would index and check every field again, for nothing Vapor reads.
        var headers = HTTPHeaders()
        var declaredLength: Int?
        h3Request.forEachHeaderField { name, value in
            if name == "content-length" { declaredLength = Int(value) }
            headers.add(name: name, value: value)
        }
        // HTTP/3 carries the authority in `:authority` (RFC 9114 §4.3.1); Vapor reads `Host`.
        if let authority = h3Request.authority, !headers.contains(name: .host) {
            headers.add(name: .host, value: authority)
        }
        let method = HTTPMethod(rawValue: h3Request.method.rawValue)
        // The request target as Vapor's HTTP/1.1 decoder takes it: path and query, unparsed.
        let url = URI(path: h3Request.path ?? "/")
        let streamsBody = streamedBodyRoutes.streamsBody(method: method, path: url.path)
        let body: ByteBuffer?
        if streamsBody {
            body = ByteBuffer()
        } else {
            body = try await Self.collect(h3Request.body, limit: maximumBodySize, declaredLength: declaredLength)
        }

        // Vapor sets `request-id` on the request's logger: held beside the application's
        // handler until a message is written, rather than rendered into it on every request.
        var logger = application.logger
        logger.handler = DeferredMetadataLogHandler(base: logger.handler)
        let request = Request(
            application: application,
            method: method,
            url: url,
            version: Self.version,
            headersNoUpdate: headers,
            collectedBody: body.flatMap { $0.readableBytes > 0 ? $0 : nil },
            remoteAddress: h3Request.remoteSocketAddress,
            logger: logger,
            byteBufferAllocator: allocator,
            on: eventLoop
        )
        let context = HTTP3RequestContext(
            clientPriority: h3Request.priority, streamID: h3Request.streamID, body: h3Request.body, streamsBody: streamsBody)
        request.http3 = context

        let response: Response
        if body == nil {
            // Larger than the limit: Vapor's own answer to a `.collect` route over TCP, through
            // the application's middleware so that its ErrorMiddleware shapes it.
            let tooLarge = application.middleware.resolve().makeResponder(chainingTo: FailingResponder(error: Abort(.payloadTooLarge)))
            response = try await tooLarge.respond(to: request).get()
        } else {
            response = try await responder.respond(to: request).get()
        }
        return try await Self.http3Response(from: response, for: request, context: context, date: dates.current, on: eventLoop)
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

    /// The Vapor response as an HTTP/3 one: status, header fields without the connection-specific
    /// ones, `date` unless the handler set one (RFC 9110 §6.6.1), the body (a streamed one once
    /// Vapor has produced it), the handler's priority override and trailers.
    static func http3Response(
        from response: Response, for request: Request, context: HTTP3RequestContext, date: HTTPField, on eventLoop: any EventLoop
    ) async throws -> HTTP3ServerResponse {
        var fields = HTTPFields()
        fields.reserveCapacity(response.headers.count + 1)
        for (name, value) in response.headers {
            // The name's canonical form is lower case already: no second lower-cased copy.
            guard let fieldName = HTTPField.Name(name), !isConnectionSpecific(fieldName.canonicalName) else { continue }
            fields.append(HTTPField(name: fieldName, value: value))
        }
        if !response.headers.contains(name: .date) { fields.append(date) }
        let head = HTTPResponse(status: HTTPResponse.Status(code: Int(response.status.code), reasonPhrase: response.status.reasonPhrase), headerFields: fields)
        var http3Response = HTTP3ServerResponse(head: head)
        if request.method == .HEAD {
            // No content (RFC 9110 §9.3.2).
        } else if response.body.count == -1, let streaming = response.storage[HTTP3StreamingBodyKey.self] {
            // Written as QUIC takes it; a middleware that replaced the body made it no stream.
            http3Response = HTTP3ServerResponse(head: head) { writer in
                try await streaming.write(HTTP3VaporBodyWriter(writer: writer))
            }
        } else if let buffer = try await body(of: response, on: eventLoop), buffer.readableBytes > 0 {
            if buffer.readableBytes <= singlePieceLimit {
                // One memcpy (NIO's `getBytes`): an array made from the bytes' view, or from a
                // raw buffer pointer, copies them one at a time.
                http3Response.body = Array(buffer: buffer)
            } else {
                http3Response.bodyStream = pieces(of: buffer)
            }
        }
        http3Response.priority = context.priorityOverride
        http3Response.trailers = context.responseTrailers
        return http3Response
    }

    /// The response's whole body: the one it holds, or else collected from its stream. Vapor's
    /// `collect` would wrap a held body in a future, one more await for every request.
    static func body(of response: Response, on eventLoop: any EventLoop) async throws -> ByteBuffer? {
        if let held = response.body.buffer { return held }
        if response.body.count == 0 { return nil }
        return try await response.body.collect(on: eventLoop).get()
    }

    /// A large body as a stream of pieces, made only as the server pulls them.
    static func pieces(of buffer: ByteBuffer) -> AsyncThrowingStream<[UInt8], any Error> {
        let remaining = NIOLockedValueBox(buffer)
        return AsyncThrowingStream(unfolding: {
            remaining.withLockedValue { buffer in
                guard buffer.readableBytes > 0 else { return nil }
                return buffer.readBytes(length: min(responseChunkSize, buffer.readableBytes))
            }
        })
    }
}

/// A responder that fails with one error, for middleware to turn into a response.
struct FailingResponder: Responder {
    let error: any Error

    func respond(to request: Request) -> EventLoopFuture<Response> {
        request.eventLoop.makeFailedFuture(error)
    }
}
