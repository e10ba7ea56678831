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

extension HTTP3Server {
    /// Where the server listens, its certificate, and how its QUIC connections behave.
    public struct Configuration: Sendable {
        /// The address or host name to listen on: by default `localhost`, loopback only.
        ///
        /// - `localhost` listens on `::1` and `127.0.0.1`, one socket each, because browsers
        ///   and curl look for it at both (RFC 6761 §6.3; Chromium tries `::1` first).
        /// - `::` listens on every address of both IP versions with one dual-stack socket
        ///   (`IPV6_V6ONLY` off), as Apple's listeners do; IPv4 clients are then seen as
        ///   v4-mapped addresses (`::ffff:a.b.c.d`).
        /// - `0.0.0.0` is every IPv4 address; any other name, every address it resolves to.
        public var host = "localhost"
        /// The UDP port to listen on; 4433 by default, 0 picks a free one (`start()` returns it).
        public var port: UInt16 = 4433
        /// PEM files; when nil, `identity` or a generated self-signed certificate is used.
        public var certificateChainFile: String?
        /// The PEM private key for `certificateChainFile`, required with it and unused without it.
        public var privateKeyFile: String?
        /// A certificate and key to serve when `certificateChainFile` is nil; when this is nil too,
        /// one is generated for `localhost`, `127.0.0.1` and `::1`.
        public var identity: SelfSignedCertificate?
        /// Where to write a qlog trace per connection; defaults to `$QLOGDIR`, nil for none.
        public var qlogDirectory: String? = ProcessInfo.processInfo.environment["QLOGDIR"]
        /// Most connections served at once; past it clients get CONNECTION_REFUSED. A connection
        /// that has closed stops counting at once, although it lingers, small, for its closing
        /// or draining period (RFC 9000 §10.2).
        public var maximumConnections = 1024
        /// The most connections one client may hold at once, counted by IPv4 address or IPv6
        /// /64; nil, the default, for no limit. Only proven addresses count (a Retry token or a
        /// completed handshake), so spoofed Initials cannot use up another client's share; past
        /// it a client gets CONNECTION_REFUSED (RFC 9000 §20.1).
        public var maximumConnectionsPerAddress: Int?
        /// Validate client addresses with Retry (RFC 9000 §8.1.2).
        public var requiresAddressValidation = false
        /// Above this many handshakes in progress (per worker), require Retry of new clients
        /// until the count falls again (RFC 9000 §8.1.2), as quic-go does under load.
        public var addressValidationThreshold = 128
        /// How long a client may take, from opening a request stream, to send its whole header
        /// section; past it the stream is reset with H3_REQUEST_INCOMPLETE (RFC 9114 §4.1.2), so a
        /// client that trickles headers (slowloris) holds a stream for this long at most. Nil
        /// turns it off. 10 s by default, as nginx's `client_header_timeout` is there for HTTP/1.
        public var requestHeaderTimeout: Duration? = .seconds(10)
        /// Accept 0-RTT requests from resuming clients. They can be replayed (RFC 8446 §8, RFC
        /// 9114 §10.9): enable it only when the handler treats early requests as repeatable.
        public var acceptsEarlyData = false
        /// The congestion controller for responses.
        public var congestionControl: QUICCongestionControl = .cubic
        /// Also listen here (a numeric address; port 0 picks one) and offer it to clients as
        /// `preferred_address` (RFC 9000 §9.6): they may move there once the handshake is confirmed.
        public var preferredAddress: (host: String, port: UInt16)?
        /// How many workers serve the address, each on its own event loop and UDP socket, so
        /// the server uses that many cores. With more than one, the sockets share the port
        /// (`SO_REUSEPORT`) and the kernel steers each packet to the worker that owns its
        /// connection, by connection ID; at most 255. One by default, as a library should not
        /// take every core unasked; `h3serve` defaults to one per core.
        public var workers = 1
        /// Attach the kernel steering program to the workers' sockets; without it only
        /// hand-overs between workers steer (for tests of that path).
        package var steersInKernel = true
        /// Issue connection IDs that a QUIC-LB load balancer routes to this server
        /// (draft-ietf-quic-load-balancers-21 §5), so a connection stays on it when the client's
        /// address changes; nil, the default, issues unroutable IDs (§3.2).
        public var loadBalancer: QUICLoadBalancerConfiguration?
        /// Send `disable_active_migration` (RFC 9000 §18.2), so clients do not move to another
        /// address on their own: for a server behind a balancer that routes by the 4-tuple only.
        public var disablesActiveMigration = false

        /// A configuration with every default.
        public init() {}
    }
}
