#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CQuicShims
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport
import Synchronization

extension HTTP3Client {
    /// How the client's QUIC connections are made: certificate checks, where to connect,
    /// timeouts, qlog, session resumption and 0-RTT.
    public struct Configuration: Sendable {
        /// How to check the server certificate; the system trust store by default.
        public var certificateVerification: CertificateVerification = .systemTrustStore
        /// SNI and the name to verify, when it is not the URL's host.
        public var serverName: String?
        /// Connect here instead of the URL's host and port (curl's `--resolve`/`--connect-to`).
        public var connectTo: (host: String, port: UInt16)?
        /// Where to write qlog traces; defaults to `$QLOGDIR`.
        public var qlogDirectory: String? = ProcessInfo.processInfo.environment["QLOGDIR"]
        /// How long the connection may stay silent (RFC 9000 §10.1); 60 s, as curl's HTTP/3. It
        /// also bounds the handshake, whose probes back off 1, 2, 4, … s on a lossy path.
        public var idleTimeoutMilliseconds = 60_000
        /// Count losses for `HTTP3Response.statistics()` (see `NWProtocolQUIC.Options.tracksLosses`).
        public var tracksLosses = false
        /// Keep session tickets here and resume with them (see `TLSOptions.sessionTicketStore`).
        public var sessionTicketStore: QUICSessionTicketStore?
        /// The AEADs to offer (RFC 9001 §5.3).
        public var cipherSuites: [QUICCipherSuite] = QUICCipherSuite.allCases
        /// With a ticket for the server in `sessionTicketStore`, send the first GET, HEAD and
        /// OPTIONS requests without a body in 0-RTT (Network.framework's `allowFastOpen`); they
        /// are sent again if the server refuses early data. 0-RTT can be replayed by an attacker
        /// (RFC 8446 §8, RFC 9114 §10.9), so only safe methods ride in it.
        public var allowsEarlyData = false
        /// Start one 1-RTT key update (RFC 9001 §6) as soon as each handshake is confirmed.
        public var initiatesKeyUpdate = false
        /// Move each connection to a new local UDP port once its handshake is confirmed, with path
        /// validation (RFC 9000 §9.2), as a client whose network changed would.
        public var migratesAfterHandshake = false

        /// A configuration with every default.
        public init() {}
    }
}
