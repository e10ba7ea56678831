#if canImport(Glibc)
import Glibc
#endif
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOHTTPTypesHTTP2
import NIOSSL
import QuicTransport

/// One HTTP/1.1 connection or one HTTP/2 stream: gathers a request, runs the handler and writes
/// its response. HTTP/1.1 requests on one connection are answered in order (RFC 9112 §9.3.2).
final class HTTPTCPRequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    private let handler: HTTP3Server.Handler
    /// `HTTP/2.0` or `HTTP/1.1`, for the origin made when the handler joins its channel.
    private let version: String
    private var origin: HTTPServerRequestOrigin?
    private let bodyLimit: Int
    private let logger: Logger
    private var head: HTTPRequest?
    private var body: [UInt8] = []
    private var tooLarge = false
    /// Complete requests, answered one after another by `serve(channel:)`.
    private var requests: AsyncStream<HTTP3ServerRequest>.Continuation?

    init(handler: @escaping HTTP3Server.Handler, version: String, bodyLimit: Int, logger: Logger) {
        self.handler = handler
        self.version = version
        self.bodyLimit = bodyLimit
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let (stream, continuation) = AsyncStream<HTTP3ServerRequest>.makeStream()
        requests = continuation
        let channel = context.channel
        // An HTTP/2 stream's channel answers with its connection's address.
        origin = HTTPServerRequestOrigin(
            protocolVersion: version, remote: channel.remoteAddress, local: channel.localAddress, eventLoop: channel.eventLoop
        )
        let handler = self.handler
        let logger = self.logger
        Task {
            await answerInOrder(stream, handler: handler, channel: channel, logger: logger)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        requests?.finish()
    }

    func channelInactive(context: ChannelHandlerContext) {
        requests?.finish()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request):
            head = request
            body = []
            tooLarge = false
        case .body(var buffer):
            guard !tooLarge else { return }
            if body.count + buffer.readableBytes > bodyLimit {
                tooLarge = true
                body = []
            } else {
                body += buffer.readBytes(length: buffer.readableBytes) ?? []
            }
        case .end(let trailers):
            guard let request = head else { return }
            head = nil
            if tooLarge {
                var response = HTTPResponse(status: .contentTooLarge)
                response.headerFields[.contentLength] = "0"
                response.headerFields[.connection] = "close"
                context.write(wrapOutboundOut(.head(response)), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in context.close(promise: nil) }
                return
            }
            requests?.yield(HTTP3ServerRequest(head: request, body: body, trailers: trailers, origin: origin))
            body = []
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("TCP connection error: \(error)")
        context.close(promise: nil)
    }
}

/// Answers each request of `requests` in turn on `channel`.
private func answerInOrder(
    _ requests: AsyncStream<HTTP3ServerRequest>, handler: HTTP3Server.Handler, channel: any Channel, logger: Logger
) async {
    for await request in requests {
        await answer(request, handler: handler, channel: channel, logger: logger)
    }
}

/// Runs the handler and writes head, body and end, waiting for each write so a large file
/// streams at the pace of the socket.
private func answer(
    _ request: HTTP3ServerRequest, handler: HTTP3Server.Handler, channel: any Channel, logger: Logger
) async {
    var response: HTTP3ServerResponse
    do {
        response = try await handler(request)
    } catch {
        logger.warning("handler failed for \(request.head.path ?? "/"): \(error)")
        response = HTTP3ServerResponse(status: .internalServerError)
    }
    if let file = response.file {
        // A file body streams from disk at the socket's pace.
        response.bodyStream = file.chunks()
        response.file = nil
    }
    // A 304 has no content, and its content-length would describe the 200 (RFC 9110 §8.6).
    if response.bodyStream == nil, response.head.headerFields[.contentLength] == nil, request.head.method != .head,
        response.head.status != .notModified
    {
        response.head.headerFields[.contentLength] = "\(response.body.count)"
    }
    do {
        try await channel.writeAndFlush(HTTPResponsePart.head(response.head))
        if request.head.method != .head {
            if let stream = response.bodyStream {
                for try await chunk in stream where !chunk.isEmpty {
                    try await channel.writeAndFlush(HTTPResponsePart.body(ByteBuffer(bytes: chunk)))
                }
            } else if !response.body.isEmpty {
                try await channel.writeAndFlush(HTTPResponsePart.body(ByteBuffer(bytes: response.body)))
            }
        }
        try await channel.writeAndFlush(HTTPResponsePart.end(response.trailers))
    } catch {
        logger.debug("response to \(request.head.path ?? "/") not completed: \(error)")
        try? await channel.close()
    }
}
