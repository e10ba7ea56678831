#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import AsyncHTTPClient
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

extension HTTPSession {
    /// How a session chooses between HTTP/3 and TCP, discovers HTTP/3, and connects.
    public struct Configuration: Sendable {
        /// How HTTP/3 and TCP are chosen; `discovery` by default.
        public var policy: HTTPVersionPolicy = .discovery
        /// How to check server certificates, over QUIC and TCP alike; the system trust store by default.
        public var certificateVerification: CertificateVerification = .systemTrustStore
        /// Connect here for the request's origin (curl's `--resolve`/`--connect-to`).
        public var connectTo: (host: String, port: UInt16)?
        /// Where HTTP/3 connections write qlog traces; defaults to `$QLOGDIR`, nil for none.
        public var qlogDirectory: String? = ProcessInfo.processInfo.environment["QLOGDIR"]
        /// Where `Alt-Svc` is remembered; nil ignores `Alt-Svc` altogether.
        public var altServiceCache: AltServiceCache? = AltServiceCache()
        /// The DNS server for HTTPS records; nil uses the system's (`/etc/resolv.conf`).
        public var httpsRecordResolver: HTTPSRecordResolver?
        /// Look up HTTPS records in `discovery`. IP literals and `localhost` are never looked up.
        public var looksUpHTTPSRecords = true
        /// How long the HTTP/3 handshake runs alone before TCP joins the race.
        public var happyEyeballsDelay: Duration = .milliseconds(300)
        /// How long an HTTP/3 target whose handshake failed is marked broken and skipped
        /// (RFC 7838 §2.4); 300 s by default.
        public var brokenAlternativeDuration: Duration = .seconds(300)
        /// Count losses for `HTTPSessionResponse.statistics()` (see `NWProtocolQUIC.Options.tracksLosses`).
        public var tracksLosses = false
        /// Keep session tickets here and resume HTTP/3 connections with them.
        public var sessionTicketStore: QUICSessionTicketStore?
        /// The AEADs HTTP/3 offers (RFC 9001 §5.3).
        public var cipherSuites: [QUICCipherSuite] = QUICCipherSuite.allCases
        /// HTTP/3 sends safe requests in 0-RTT when it resumes (`HTTP3Client.Configuration`).
        public var allowsEarlyData = false
        /// HTTP/3 connections update their keys once confirmed (`HTTP3Client.Configuration`).
        public var initiatesKeyUpdate = false
        /// HTTP/3 connections migrate to a new local port once confirmed (`HTTP3Client.Configuration`).
        public var migratesAfterHandshake = false

        /// A configuration with every default.
        public init() {}
    }
}
