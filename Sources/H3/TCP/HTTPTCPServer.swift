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
import NIOPosix
import NIOSSL
import QuicTransport

/// Serves HTTP/2 and HTTP/1.1 over TLS on TCP with the same handler as `HTTP3Server`, so one
/// application answers on every version; ALPN picks the version (RFC 9113 §3.2, RFC 7301).
///
/// This is the server half of HTTP/3 discovery: the handler adds an `Alt-Svc` field (RFC 7838
/// §3) to tell clients the same origin also speaks HTTP/3, as h3serve does for both transports.
public final class HTTPTCPServer: Sendable {
    /// Where the server listens, its certificate, and how large a request body it accepts.
    public struct Configuration: Sendable {
        /// The address or host name to listen on: by default `localhost`, which is `::1` and
        /// `127.0.0.1` (loopback only). `::` listens on every address of both IP versions; see
        /// `HTTP3Server.Configuration.host`.
        public var host = "localhost"
        /// The TCP port to listen on; 4433 by default, 0 picks a free one (`start()` returns it).
        public var port: UInt16 = 4433
        /// The certificate chain and key, PEM.
        public var certificateChainPEM: String
        /// The private key of the chain's first certificate, PEM.
        public var privateKeyPEM: String
        /// Request bodies larger than this are refused with 413.
        public var maximumRequestBodySize = 64 << 20

        /// A configuration with this certificate chain and key, PEM, and every other default.
        public init(certificateChainPEM: String, privateKeyPEM: String) {
            self.certificateChainPEM = certificateChainPEM
            self.privateKeyPEM = privateKeyPEM
        }
    }

    /// The configuration the server was created with.
    public let configuration: Configuration
    private let handler: HTTP3Server.Handler
    private let sslContext: NIOSSLContext
    private let logger = Logger(label: "h3.tcp-server")
    /// One listening channel per address (`::1` and `127.0.0.1` for `localhost`).
    private let channels = NIOLockedValueBox<[any Channel]>([])

    /// Fails with a clear error when the certificate or key does not parse.
    public init(configuration: Configuration, handler: @escaping HTTP3Server.Handler) throws {
        self.configuration = configuration
        self.handler = handler
        let chain = try NIOSSLCertificate.fromPEMBytes(Array(configuration.certificateChainPEM.utf8))
        let key = try NIOSSLPrivateKey(bytes: Array(configuration.privateKeyPEM.utf8), format: .pem)
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) },
            privateKey: .privateKey(key)
        )
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2", "http/1.1"]
        sslContext = try NIOSSLContext(configuration: tls)
    }

    /// Binds the TCP port and starts serving; returns the bound port.
    @discardableResult
    public func start() async throws -> UInt16 {
        let sslContext = self.sslContext
        let handler = self.handler
        let limit = configuration.maximumRequestBodySize
        let logger = self.logger
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
                }.flatMap {
                    channel.configureHTTP2SecureUpgrade(
                        h2ChannelConfigurator: { channel in
                            channel.configureHTTP2Pipeline(mode: .server) { stream in
                                stream.eventLoop.makeCompletedFuture {
                                    try stream.pipeline.syncOperations.addHandlers(
                                        HTTP2FramePayloadToHTTPServerCodec(),
                                        HTTPTCPRequestHandler(
                                            handler: handler, version: HTTPServerRequestOrigin.http2, bodyLimit: limit, logger: logger
                                        )
                                    )
                                }
                            }.map { _ in }
                        },
                        http1ChannelConfigurator: { channel in
                            channel.eventLoop.makeCompletedFuture {
                                try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                                try channel.pipeline.syncOperations.addHandlers(
                                    HTTP1ToHTTPServerCodec(secure: true),
                                    HTTPTCPRequestHandler(
                                        handler: handler, version: HTTPServerRequestOrigin.http1, bodyLimit: limit, logger: logger
                                    )
                                )
                            }
                        }
                    )
                }
            }
        // The same addresses as HTTP/3's for the same host, all on the port the first picks.
        let addresses = try QUICHostResolver.listeningAddresses(
            host: configuration.host, port: Int(configuration.port), options: QUICSocketOptions()
        )
        var bound: [any Channel] = []
        var port = Int(configuration.port)
        do {
            for var address in addresses {
                address.port = port
                do {
                    bound.append(try await bootstrap.bind(to: address).get())
                } catch let error as IOError where addresses.count > 1 && error.errnoCode == EADDRNOTAVAIL {
                    logger.notice("cannot listen on \(address); serving the other addresses", metadata: ["error": "\(error)"])
                    continue
                }
                if port == 0 { port = bound[0].localAddress?.port ?? 0 }
            }
        } catch {
            for channel in bound { try? await channel.close() }
            throw error
        }
        guard !bound.isEmpty else { throw IOError(errnoCode: EADDRNOTAVAIL, reason: "bind(\(configuration.host))") }
        channels.withLockedValue { $0 = bound }
        return UInt16(port)
    }

    /// Stops accepting connections; open ones finish on their own.
    public func shutdown() async {
        let channels = self.channels.withLockedValue { channels in defer { channels = [] }; return channels }
        for channel in channels { try? await channel.close() }
    }
}

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
        origin = HTTPServerRequestOrigin(protocolVersion: version, remoteAddress: channel.remoteAddress?.ipAddress)
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

extension HTTPField.Name {
    /// `Alt-Svc` (RFC 7838 §3).
    public static var altSvc: HTTPField.Name { HTTPField.Name("alt-svc")! }
}
