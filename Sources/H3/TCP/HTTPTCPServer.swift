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
