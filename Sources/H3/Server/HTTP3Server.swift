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

/// An HTTP/3 server (RFC 9114): every QUIC connection runs an `HTTP3Codec`, and each complete
/// request goes to the handler, whose response is sent back on the request's stream.
///
/// Without a certificate it generates a self-signed one for `localhost`, `127.0.0.1` and `::1`.
public final class HTTP3Server: Sendable {
    /// Called once per request as soon as its head arrives; a thrown error becomes a 500.
    ///
    /// It starts at once on the connection's event loop (`Task.immediate`, SE-0472) and, if it
    /// suspends, resumes there (its executor preference, SE-0417), beside that connection's
    /// I/O, so it must not block: hand blocking or long computing work to `Task.detached` or a
    /// thread pool and await it there.
    public typealias Handler = @Sendable (HTTP3ServerRequest) async throws -> HTTP3ServerResponse

    /// Answers a request on the connection's event loop without a task, as soon as its head
    /// arrives: return the response, or nil to pass the request on to the ``Handler``.
    ///
    /// For answers that need no waiting, such as a file the process can open at once: no task
    /// is created, which saves about a tenth of a small GET's cost. It runs beside the
    /// connection's I/O, so it must neither block nor take long, and it cannot read the request
    /// body (the body is still arriving; hand such requests to the handler).
    public typealias Responder = @Sendable (HTTP3ServerRequest) -> HTTP3ServerResponse?

    /// Takes a request to answer later, on the connection's event loop without a task, as soon
    /// as its head arrives: return true and complete the ``HTTP3ResponsePromise`` once, from any
    /// thread; or return false to pass the request on to the ``Handler`` (the promise is then
    /// void).
    ///
    /// For frameworks built on NIO futures, such as Vapor, whose responders return one: the
    /// request goes through them as their own HTTP/1.1 server sends it, with no task to create
    /// and no continuation to resume, and the framework's future completes the promise from its
    /// callback (`future.whenComplete(promise.complete(with:))`). A failure answers 500, as a
    /// handler's error does. It runs beside the connection's I/O, so it must neither block nor
    /// take long, and, like a ``Responder``, it cannot read the request body.
    public typealias PromiseResponder = @Sendable (HTTP3ServerRequest, HTTP3ResponsePromise) -> Bool

    /// The configuration the server was created with.
    public let configuration: Configuration
    /// The certificate the server generated because the configuration named none.
    public let generatedCertificate: SelfSignedCertificate?
    private let handler: Handler
    private let responder: Responder?
    private let promiseResponder: PromiseResponder?
    private let credentials: TLSCredentials
    private let logger: Logger
    private let workers = NIOLockedValueBox<QUICServerWorkerGroup?>(nil)
    /// Every worker's open connections; each is only used on its own loop.
    private let connections = NIOLockedValueBox<[ObjectIdentifier: HTTP3ServerConnection]>([:])
    /// The connections this server accepted that are still in memory, open or closed.
    package let liveConnections = QUICLiveConnections()

    /// Creates a server and loads its certificate, or generates one; nothing is bound before
    /// `start()`. Throws when a certificate file has no key, or a certificate cannot be loaded
    /// or generated.
    ///
    /// A `responder` answers first, without a task, then a `promiseResponder`; the requests both
    /// pass on (nil) go to the `handler`.
    public init(
        configuration: Configuration, responder: Responder? = nil, promiseResponder: PromiseResponder? = nil,
        handler: @escaping Handler
    ) throws {
        self.configuration = configuration
        self.handler = handler
        self.responder = responder
        self.promiseResponder = promiseResponder
        self.logger = Logger(label: "h3.server")
        if let chain = configuration.certificateChainFile {
            guard let key = configuration.privateKeyFile else { throw TLSError.missingFile(path: "(no private key given for \(chain))") }
            credentials = try .server(certificateChainFile: chain, privateKeyFile: key)
            generatedCertificate = nil
        } else {
            let identity = try configuration.identity ?? SelfSignedCertificate.generate()
            credentials = try .server(certificateChainPEM: identity.certificatePEM, privateKeyPEM: identity.privateKeyPEM)
            generatedCertificate = configuration.identity == nil ? identity : nil
        }
    }

    /// Binds the UDP socket and starts serving; returns the bound port.
    @discardableResult
    public func start() async throws -> UInt16 {
        var quic = QUICConfiguration()
        quic.alpn = [HTTP3.alpn]
        quic.qlogDirectory = configuration.qlogDirectory
        quic.congestionControl = configuration.congestionControl
        quic.disablesActiveMigration = configuration.disablesActiveMigration
        var endpointConfiguration = QUICEndpointCore.Configuration(quic: quic, credentials: credentials)
        endpointConfiguration.maximumConnections = configuration.maximumConnections
        endpointConfiguration.maximumConnectionsPerAddress = configuration.maximumConnectionsPerAddress.map { max(1, $0) }
        endpointConfiguration.requiresRetry = configuration.requiresAddressValidation
        endpointConfiguration.retryThreshold = max(0, configuration.addressValidationThreshold)
        endpointConfiguration.acceptsEarlyData = configuration.acceptsEarlyData
        let requestHeaderTimeout = configuration.requestHeaderTimeout.map(Self.nanoseconds)
        endpointConfiguration.makeApplicationCodec = {
            let codec = try! HTTP3Codec(role: .server)
            codec.tracksRequestHeads = requestHeaderTimeout != nil
            return codec
        }
        endpointConfiguration.liveConnections = liveConnections
        endpointConfiguration.loadBalancer = configuration.loadBalancer
        let handler = self.handler
        let responder = self.responder
        let promiseResponder = self.promiseResponder
        let logger = self.logger
        let connections = self.connections
        let workers = try await QUICServerWorkerGroup.bind(
            host: configuration.host,
            port: Int(configuration.port),
            preferred: configuration.preferredAddress.map { ($0.host, Int($0.port)) },
            configuration: endpointConfiguration,
            workerCount: configuration.workers,
            kernelSteering: configuration.steersInKernel,
            logger: logger
        ) { driver in
            let connection = HTTP3ServerConnection(
                driver: driver, responder: responder, promiseResponder: promiseResponder, handler: handler,
                requestHeaderTimeout: requestHeaderTimeout, logger: logger
            )
            connection.attach()
            let key = ObjectIdentifier(connection)
            connections.withLockedValue { $0[key] = connection }
            connection.onFinished = { connections.withLockedValue { $0[key] = nil } }
        }
        self.workers.withLockedValue { $0 = workers }
        return workers.port
    }

    /// How many connections are open now, handshakes and closing or draining periods included.
    public func connectionCount() async -> Int {
        guard let workers = workers.withLockedValue({ $0 }) else { return 0 }
        return await workers.connectionCount()
    }

    /// The bound `preferred_address` (`HOST:PORT`) once started, if one was configured.
    public var boundPreferredAddress: String? {
        workers.withLockedValue { $0?.preferredAddress?.description }
    }

    /// Datagrams one worker received for another worker's connection and forwarded to it. With
    /// the kernel steering by connection ID this stays at zero in steady state.
    public var forwardedDatagrams: Int { workers.withLockedValue { $0?.forwardedDatagrams ?? 0 } }

    /// The first eight datagrams forwarded, described, for diagnosing why the kernel's
    /// steering missed them.
    package var forwardedSamples: [String] { workers.withLockedValue { $0?.forwardedSamples ?? [] } }

    /// What each worker has done so far, in worker order; empty before `start()`.
    public func workerStatistics() async -> [QUICServerWorkerStatistics] {
        guard let workers = workers.withLockedValue({ $0 }) else { return [] }
        return await workers.statistics()
    }

    /// Whether the kernel steers packets to workers by connection ID (more than one worker, and
    /// the reuseport program attached).
    public var isSteeredByKernel: Bool { workers.withLockedValue { $0?.isSteeredByKernel ?? false } }

    /// Shuts down gracefully (RFC 9114 §5.2): GOAWAY on every connection, requests already
    /// received finish, newer ones are rejected with H3_REQUEST_REJECTED so clients can retry
    /// elsewhere, new connections are refused, and the socket closes once all connections have
    /// ended or after `gracePeriod`.
    public func shutdown(gracePeriod: Duration = .seconds(10)) {
        _ = beginShutdown(gracePeriod: gracePeriod)
    }

    /// Sends GOAWAY on every open connection and closes each once its requests are done, but
    /// keeps accepting new connections: clients move their next requests to a fresh one.
    /// Starts every open connection's shutdown (a no-op for one already shutting down).
    public func rotateConnections() {
        for connection in connections.withLockedValue({ Array($0.values) }) {
            connection.eventLoop.execute { connection.beginShutdown() }
        }
    }

    /// Like `shutdown(gracePeriod:)`, and returns once the socket is closed.
    public func shutdownGracefully(gracePeriod: Duration = .seconds(10)) async {
        try? await beginShutdown(gracePeriod: gracePeriod)?.get()
    }

    /// A duration in whole nanoseconds, none below zero.
    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(clamping: seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    private func beginShutdown(gracePeriod: Duration) -> EventLoopFuture<Void>? {
        guard let workers = workers.withLockedValue({ workers in defer { workers = nil }; return workers }) else { return nil }
        let timeout = TimeAmount.nanoseconds(Int64(clamping: Self.nanoseconds(gracePeriod)))
        // Refuse first, so no connection arrives after the GOAWAYs went out.
        let closed = workers.closeWhenDrained(timeout: timeout)
        rotateConnections()
        return closed
    }
}
