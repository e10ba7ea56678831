import H3
import Vapor

extension Application.HTTP3 {
    /// The HTTP/3 server's settings: the QUIC and TLS ones `HTTP3Server.Configuration` has, and
    /// how the server sits beside Vapor's HTTP server.
    public struct Configuration: Sendable {
        /// QUIC and TLS: `certificateChainFile` and `privateKeyFile` (PEM), or `identity`, or
        /// neither (a self-signed certificate for `localhost` is generated at start);
        /// `qlogDirectory`, `workers`, connection limits, and the rest. Its `host` and `port`
        /// are not used: ``hostname`` and ``port`` below decide.
        public var server = HTTP3Server.Configuration()

        /// The address to bind the UDP socket to; nil binds the one Vapor's HTTP server binds,
        /// except that Vapor's `localhost` binds both `::1` and `127.0.0.1` (as `HTTP3Server`
        /// does), since browsers try `::1` first.
        public var hostname: String?

        /// The UDP port; nil takes the port number Vapor's HTTP server bound, so that
        /// `Alt-Svc: h3=":PORT"` names the same port for both, as browsers expect of port 443.
        /// 0 lets the system choose.
        public var port: UInt16?

        /// Whether responses over TCP carry an `Alt-Svc` field naming the HTTP/3 port
        /// (RFC 7838 §3; RFC 9114 §3.1.1), so that browsers move to HTTP/3.
        public var advertisesAlternativeService = true

        /// How long clients may remember the `Alt-Svc` advertisement (`ma`, RFC 7838 §3.1).
        public var alternativeServiceMaxAge: UInt64 = AltService.defaultMaxAge

        /// The largest request body the bridge collects for a route. nil takes
        /// `app.routes.defaultMaxBodySize`, Vapor's limit for `.collect` routes; a larger body
        /// is answered 413 as Vapor answers it over TCP.
        ///
        /// Vapor 4 records no route's `body:` strategy and lets no other module build a
        /// request with a streamed body, so over HTTP/3 every route gets its body collected
        /// under this one limit: raise it for routes declared `body: .collect(maxSize:)`, and
        /// mark `body: .stream` routes ``Vapor/Route/streamsHTTP3RequestBody()`` so that they
        /// read the body as it arrives, with no limit, through `req.streamedBody`.
        public var maximumBodySize: ByteCount?

        /// How long a graceful shutdown waits for requests in flight after GOAWAY
        /// (RFC 9114 §5.2) before it closes the connections that are left.
        public var shutdownGracePeriod: Duration = .seconds(10)

        /// A configuration with a generated certificate, on Vapor's hostname and port.
        public init() {}

        /// A configuration that presents the certificate chain and key in these PEM files.
        public init(certificateChainFile: String, privateKeyFile: String) {
            server.certificateChainFile = certificateChainFile
            server.privateKeyFile = privateKeyFile
        }
    }
}
