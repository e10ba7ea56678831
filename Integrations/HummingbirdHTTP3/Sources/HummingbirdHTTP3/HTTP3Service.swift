import H3
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle

/// Serves a Hummingbird application's routes over HTTP/3 (RFC 9114), beside its TCP server.
///
/// An application adds it as one more service, the way Hummingbird adds a database client or
/// a job queue, and keeps its router, middleware and request context:
///
/// ```swift
/// let router = Router()
/// router.add(middleware: AltSvcMiddleware(http3Port: 4433))   // browsers learn of HTTP/3
/// router.get("/hello") { _, _ in "Hello" }
/// var app = Application(router: router, configuration: .init(address: .hostname("localhost", port: 8080)))
/// app.addServices(HTTP3Service(router: router, configuration: http3))   // the one line
/// try await app.runService()
/// ```
///
/// Why a service, and not an `Application` initialiser or a server builder: Hummingbird's
/// `HTTPServerBuilder` makes NIO channel pipelines on a TCP listener, and HTTP/3 has neither;
/// a service runs and stops with the application's `ServiceGroup`, so `runService()` starts
/// both transports and a SIGTERM or SIGINT shuts both down gracefully.
///
/// Each request is answered by the same responder the router builds for TCP, with a context
/// made by the context type's own `init(source:)`: its `ApplicationRequestContextSource` holds
/// a stand-in channel with the client's and server's addresses and the connection's event loop.
/// Request and response bodies stream both ways, held back by QUIC flow control.
public struct HTTP3Service<Responder: HTTPResponder>: Service
where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
    /// Where and how HTTP/3 is served: address, port, certificate and key (PEM), limits.
    public let configuration: HTTP3Server.Configuration
    /// How long requests in flight may take to finish once shutdown begins.
    public let gracePeriod: Duration
    let responder: Responder
    let logger: Logger
    let onServerRunning: (@Sendable (UInt16) async -> Void)?

    /// Serves `responder` over HTTP/3.
    ///
    /// - Parameters:
    ///   - onServerRunning: called with the bound UDP port once the server listens.
    public init(
        responder: Responder,
        configuration: HTTP3Server.Configuration,
        gracePeriod: Duration = .seconds(10),
        logger: Logger = Logger(label: "HummingbirdHTTP3"),
        onServerRunning: (@Sendable (UInt16) async -> Void)? = nil
    ) {
        self.responder = responder
        self.configuration = configuration
        self.gracePeriod = gracePeriod
        self.logger = logger
        self.onServerRunning = onServerRunning
    }

    /// Serves the routes of `router` (with its middleware) over HTTP/3.
    public init<Builder: HTTPResponderBuilder>(
        router: Builder,
        configuration: HTTP3Server.Configuration,
        gracePeriod: Duration = .seconds(10),
        logger: Logger = Logger(label: "HummingbirdHTTP3"),
        onServerRunning: (@Sendable (UInt16) async -> Void)? = nil
    ) where Builder.Responder == Responder {
        self.init(
            responder: router.buildResponder(), configuration: configuration, gracePeriod: gracePeriod,
            logger: logger, onServerRunning: onServerRunning
        )
    }

    /// Listens until the service group shuts down gracefully, then sends GOAWAY (RFC 9114
    /// §5.2) and lets requests in flight finish within `gracePeriod`. Cancelled, it closes at once.
    public func run() async throws {
        let responder = self.responder
        let logger = self.logger
        let dates = HTTPDateField()
        let server = try HTTP3Server(configuration: configuration) { request in
            try await Self.respond(to: request, with: responder, dates: dates, logger: logger)
        }
        let port = try await server.start()
        logger.info("serving HTTP/3", metadata: ["host": "\(configuration.host)", "port": "\(port)"])
        await onServerRunning?(port)
        do {
            try await gracefulShutdown()
        } catch {
            server.shutdown(gracePeriod: .zero)
            throw error
        }
        await server.shutdownGracefully(gracePeriod: gracePeriod)
    }

    /// Answers one request as Hummingbird's `Application` does on TCP: a context from the
    /// context type's `init(source:)`, the responder's response (500 when the responder throws
    /// what no router turned into a response), and a `Date` field.
    ///
    /// Inlined into the server's handler, as `HTTP3ResponseBody.make` is into it: each async
    /// call a nonisolated function returns from is a switch back to its executor, which under
    /// the connection's task-executor preference looks that preference up under a lock.
    @inline(__always)
    static func respond(
        to request: HTTP3ServerRequest,
        with responder: Responder,
        dates: HTTPDateField,
        logger: Logger
    ) async throws -> HTTP3ServerResponse {
        let channel = HTTP3RequestChannel(for: request, fallbackEventLoop: MultiThreadedEventLoopGroup.singleton.any())
        // Hummingbird's request ID, held beside the application's handler until a message is
        // written rather than set on it: one fewer rendering of all its metadata per request.
        var requestLogger = logger
        requestLogger.handler = DeferredMetadataLogHandler(base: logger.handler, metadata: ["hb.request.id": .stringConvertible(RequestID())])
        let context = Responder.Context(source: ApplicationRequestContextSource(channel: channel, logger: requestLogger))
        let hummingbirdRequest = Request(head: request.head, body: RequestBody(asyncSequence: HTTP3RequestBodyBuffers(body: request.body)))
        var response: Response
        do {
            // The router turns an `HTTPResponseError` into its response itself.
            response = try await responder.respond(to: hummingbirdRequest, context: context)
        } catch {
            requestLogger.debug("Unrecognised Error", metadata: ["error.type": "\(error)"])
            response = Response(status: .internalServerError)
        }
        // Over a date the handler set, as Hummingbird's own server does. Not through the
        // subscript, which makes the field anew and reshapes the storage to replace it.
        if let index = response.headers.firstIndex(where: { $0.name == .date }) {
            response.headers[index] = dates.current
        } else {
            response.headers.append(dates.current)
        }
        return try await HTTP3ResponseBody.make(response, for: channel)
    }
}
