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
        /// How HTTP/3 connections are made: qlog, session tickets and 0-RTT, ciphers, key update,
        /// migration, idle timeout. Its `connectTo` and `certificateVerification` also serve TCP.
        public var http3 = HTTP3Client.Configuration()
        /// How to check server certificates, over QUIC and TCP alike; the system trust store by default.
        public var certificateVerification: CertificateVerification {
            get { http3.certificateVerification }
            set { http3.certificateVerification = newValue }
        }
        /// Connect here for the request's origin, over QUIC and TCP alike (curl's `--resolve`/`--connect-to`).
        public var connectTo: (host: String, port: UInt16)? {
            get { http3.connectTo }
            set { http3.connectTo = newValue }
        }
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

        /// A configuration with every default.
        public init() {}
    }
}
