import H3
import NIOConcurrencyHelpers
import NIOCore
import Vapor

/// Vapor's HTTP server and an HTTP/3 server run as one `Server`: started, and stopped, by
/// whatever starts and stops `app.server` (the `serve` command, `app.asyncShutdown()`).
///
/// The TCP side is `app.http.server.shared`, configured as ever through
/// `app.http.server.configuration`; the HTTP/3 side takes `app.http3.configuration` and
/// answers every request with the application's responder (routes, middleware, errors) through
/// ``HTTP3VaporResponder``.
public final class VaporHTTP3Server: Vapor.Server, Sendable {
    private let application: Application
    private let http3 = NIOLockedValueBox<HTTP3Server?>(nil)
    private let running = NIOLockedValueBox<Running?>(nil)

    /// What the HTTP/3 side is, while it runs.
    private struct Running {
        let port: UInt16
        /// The `Alt-Svc` field value advertising it, nil when the configuration says not to.
        let altSvc: String?
    }

    init(application: Application) {
        self.application = application
    }

    /// Vapor's HTTP server, the TCP half.
    public var tcp: HTTPServer { application.http.server.shared }

    /// The UDP port HTTP/3 is served on while running.
    public var http3Port: UInt16? { running.withLockedValue { $0?.port } }

    /// The `Alt-Svc` field value that sends TCP clients to HTTP/3 (RFC 7838 §3), such as
    /// `h3=":8080"; ma=86400`, while the server runs and
    /// `advertisesAlternativeService` is set; nil otherwise.
    public var altSvc: String? { running.withLockedValue { $0?.altSvc } }

    /// Completes when Vapor's HTTP server has shut down.
    public var onShutdown: EventLoopFuture<Void> { tcp.onShutdown }

    /// Starts Vapor's HTTP server on `address` (or its configured one), then the HTTP/3 server
    /// on the configured UDP port, by default the port number TCP bound.
    public func start(address: BindAddress?) async throws {
        let tcp = self.tcp
        // The name asked for, before TCP's start overwrites its configuration with the address bound.
        var askedHostname = tcp.configuration.hostname
        if case .hostname(let hostname?, _) = address { askedHostname = hostname }
        try await tcp.start(address: address)
        let configuration = application.http3.configuration
        var serverConfiguration = configuration.server
        let tcpAddress = tcp.localAddress
        // `localhost` stays a name: HTTP3Server binds both ::1 and 127.0.0.1 for it, whereas TCP
        // bound the first address only. A browser tries ::1 first, and over UDP it gets no
        // happy-eyeballs fallback to 127.0.0.1.
        serverConfiguration.host = configuration.hostname
            ?? (askedHostname == "localhost" ? askedHostname : tcpAddress?.ipAddress ?? tcp.configuration.hostname)
        guard let port = configuration.port ?? tcpAddress?.port.map({ UInt16($0) }) else {
            await tcp.shutdown()
            throw Abort(.internalServerError, reason: "HTTP/3 needs a UDP port: set app.http3.configuration.port when Vapor listens on a Unix domain socket")
        }
        serverConfiguration.port = port
        let responder = HTTP3VaporResponder(application: application, responder: application.responder.current)
        do {
            let server = try HTTP3Server(
                configuration: serverConfiguration, promiseResponder: responder.respondWithoutTask, handler: responder.respond)
            let bound = try await server.start()
            http3.withLockedValue { $0 = server }
            let altSvc = configuration.advertisesAlternativeService
                ? AltService(protocolID: HTTP3.alpn, port: bound, maxAge: configuration.alternativeServiceMaxAge).description : nil
            running.withLockedValue { $0 = Running(port: bound, altSvc: altSvc) }
            application.logger.notice("HTTP/3 server started on \(serverConfiguration.host):\(bound) (UDP)")
        } catch {
            await tcp.shutdown()
            throw error
        }
    }

    /// Shuts both servers down at once: HTTP/3 sends GOAWAY (RFC 9114 §5.2) and lets the
    /// requests it already received finish, for up to `shutdownGracePeriod`; Vapor's server
    /// stops accepting and lets its connections finish, for up to its `shutdownTimeout`.
    public func shutdown() async {
        let server = http3.withLockedValue { server in defer { server = nil }; return server }
        let gracePeriod = application.http3.configuration.shutdownGracePeriod
        async let http3Stopped: Void = { await server?.shutdownGracefully(gracePeriod: gracePeriod) }()
        await tcp.shutdown()
        await http3Stopped
        running.withLockedValue { $0 = nil }
    }

    /// For Vapor's synchronous callers; blocks the calling thread, never call it on an event loop.
    @available(*, noasync, message: "Use the async start(address:) method instead.")
    public func start(address: BindAddress?) throws {
        try blocking { try await self.start(address: address) }
    }

    /// For Vapor's synchronous callers; blocks the calling thread, never call it on an event loop.
    @available(*, noasync, message: "Use the async shutdown() method instead.")
    public func shutdown() {
        try? blocking { await self.shutdown() }
    }

    private func blocking(_ body: @escaping @Sendable () async throws -> Void) throws {
        let promise = application.eventLoopGroup.any().makePromise(of: Void.self)
        promise.completeWithTask(body)
        try promise.futureResult.wait()
    }
}
