#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOConcurrencyHelpers

/// Identifies a protocol in `metadata(definition:)`, as in Network.framework.
public struct NWProtocolDefinition: Hashable, Sendable, CustomStringConvertible {
    /// The protocol's name, matching Apple's `name`: `"quic"` for QUIC.
    public let name: String
    public var description: String { name }
}

/// Base class of protocol options, as in Network.framework.
// @unchecked Sendable: no stored state; subclasses state their own invariant. A non-final class
// cannot be checked, and Apple's options classes are Sendable.
public class NWProtocolOptions: @unchecked Sendable {}

/// Base class of per-connection protocol metadata, as in Network.framework.
// @unchecked Sendable: no stored state; subclasses state their own invariant.
public class NWProtocolMetadata: @unchecked Sendable {
    /// The protocol this metadata belongs to.
    public var definition: NWProtocolDefinition { NWProtocolDefinition(name: "unknown") }
}

/// QUIC (RFC 9000) over TLS 1.3 (RFC 9001): options, per-stream metadata and the protocol definition.
// @unchecked Sendable: a namespace with no stored instance state, as Apple's class is.
public final class NWProtocolQUIC: @unchecked Sendable {
    /// QUIC's definition, for `metadata(definition:)`, matching Apple's
    /// `NWProtocolQUIC.definition`.
    public static let definition = NWProtocolDefinition(name: "quic")

    /// The kind of stream a connection in a group carries (RFC 9000 §2.1).
    public enum StreamType: Hashable, Sendable {
        /// Both sides send on the stream (RFC 9000 §2.1).
        case bidirectional
        /// Only the side that opened the stream sends on it (RFC 9000 §2.1).
        case unidirectional
    }

    /// QUIC options: ALPN, limits and transport parameters (RFC 9000 §18.2), datagrams (RFC 9221), TLS.
    ///
    /// A group, connection or listener copies its options when it is created; change them before.
    // @unchecked Sendable: a configuration object, like Network.framework's, meant to be filled in
    // on one thread before a group, connection or listener is made from it, which copies it.
    public final class Options: NWProtocolOptions, @unchecked Sendable {
        /// Whether a stream opened from these options is bidirectional or unidirectional.
        public enum Direction: Hashable, Sendable {
            /// Open bidirectional streams; the default.
            case bidirectional
            /// Open unidirectional streams: this side sends, the peer cannot reply on them.
            case unidirectional
        }

        /// ALPN protocol IDs in preference order (RFC 9001 §8.1).
        public var alpn: [String]
        /// Idle timeout in milliseconds (`max_idle_timeout`, RFC 9000 §10.1).
        public var idleTimeout = Int(QUICConfiguration.defaults.idleTimeoutMilliseconds)
        /// `initial_max_data` (RFC 9000 §18.2): bytes the peer may send on the whole connection
        /// before MAX_DATA raises the limit; 16 MiB by default.
        public var initialMaxData = Int(QUICConfiguration.defaults.initialMaxData)
        /// `initial_max_stream_data_bidi_local` (RFC 9000 §18.2): bytes the peer may send on each
        /// bidirectional stream this side opens, before MAX_STREAM_DATA; 4 MiB by default.
        public var initialMaxStreamDataBidirectionalLocal = Int(QUICConfiguration.defaults.initialMaxStreamDataBidirectionalLocal)
        /// `initial_max_stream_data_bidi_remote` (RFC 9000 §18.2): bytes the peer may send on each
        /// bidirectional stream it opens, before MAX_STREAM_DATA; 4 MiB by default.
        public var initialMaxStreamDataBidirectionalRemote = Int(QUICConfiguration.defaults.initialMaxStreamDataBidirectionalRemote)
        /// `initial_max_stream_data_uni` (RFC 9000 §18.2): bytes the peer may send on each
        /// unidirectional stream it opens, before MAX_STREAM_DATA; 4 MiB by default.
        public var initialMaxStreamDataUnidirectional = Int(QUICConfiguration.defaults.initialMaxStreamDataUnidirectional)
        /// `initial_max_streams_bidi` (RFC 9000 §18.2): how many bidirectional streams the peer may
        /// open before MAX_STREAMS; 100 by default.
        public var initialMaxStreamsBidirectional = Int(QUICConfiguration.defaults.initialMaxStreamsBidirectional)
        /// `initial_max_streams_uni` (RFC 9000 §18.2): how many unidirectional streams the peer may
        /// open before MAX_STREAMS; 100 by default.
        public var initialMaxStreamsUnidirectional = Int(QUICConfiguration.defaults.initialMaxStreamsUnidirectional)
        /// The largest UDP payload to send (RFC 9000 §14).
        public var maxUDPPayloadSize = QUICConfiguration.defaults.maxUDPPayloadSize
        /// Offer RFC 9221 datagrams on the tunnel.
        public var isDatagram: Bool = false
        /// `max_datagram_frame_size` when `isDatagram` is set.
        public var maxDatagramFrameSize: Int = 65_535
        /// For `NWConnection(from:using:)`: the kind of stream to open.
        public var direction: Direction = .bidirectional
        /// Certificates, verification and ciphers.
        public var tls = TLSOptions()
        /// Where to write `<odcid>_<client|server>.sqlog` qlog traces; defaults to `$QLOGDIR`.
        public var qlogDirectory: String? = ProcessInfo.processInfo.environment["QLOGDIR"]
        /// Servers: validate client addresses with a Retry round trip (RFC 9000 §8.1.2).
        public var requiresAddressValidation = false
        /// Servers: above this many handshakes in progress (per worker), new clients must first
        /// validate their address with Retry, as with `requiresAddressValidation`; below it they
        /// connect in one round trip again. An addition, as quic-go does under an Initial flood;
        /// 128 by default.
        public var addressValidationThreshold = 128
        /// Servers: accept 0-RTT data from resuming clients (RFC 9001 §4.6.1). Early data can be
        /// replayed by an attacker (RFC 8446 §8); the anti-replay cache covers one listener in
        /// one process, so turn this on only for requests that are safe to repeat.
        public var acceptsEarlyData = false
        /// Fill in `lostPackets` and `retransmittedBytes` of data-transfer reports. Off by
        /// default: ngtcp2 0.12 reports losses only through its qlog events, which cost about a
        /// third of peak throughput to produce. Writing qlog turns it on too.
        public var tracksLosses = false
        /// The congestion controller: CUBIC by default, or Reno, BBR or BBRv2.
        public var congestionControl: QUICCongestionControl = .cubic
        /// Listeners: issue connection IDs that a QUIC-LB load balancer routes to this server
        /// (draft-ietf-quic-load-balancers-21 §5); nil, the default, issues unroutable IDs (§3.2).
        /// Our addition: Network.framework has no such option.
        public var loadBalancer: QUICLoadBalancerConfiguration?
        /// Send `disable_active_migration` (RFC 9000 §18.2), so peers do not move to another
        /// address on their own: for a listener behind a balancer that routes by the 4-tuple
        /// only. Our addition.
        public var disablesActiveMigration = false

        /// Default options with no ALPN protocol; add them to `alpn` or through
        /// `sec_protocol_options_add_tls_application_protocol`.
        override public init() {
            self.alpn = []
        }

        /// Default options offering these ALPN protocol IDs.
        public convenience init(alpn: [String]) {
            self.init()
            self.alpn = alpn
        }

        /// The TLS options of the handshake, for Security's `sec_protocol_options_*` calls
        /// (verify block, ALPN, TLS versions, local identity); they change these options.
        public var securityProtocolOptions: sec_protocol_options_t { sec_protocol_options_t(options: self) }

        /// A copy, so a connection keeps the settings it started with.
        func copy() -> Options {
            let copy = Options(alpn: alpn)
            copy.idleTimeout = idleTimeout
            copy.initialMaxData = initialMaxData
            copy.initialMaxStreamDataBidirectionalLocal = initialMaxStreamDataBidirectionalLocal
            copy.initialMaxStreamDataBidirectionalRemote = initialMaxStreamDataBidirectionalRemote
            copy.initialMaxStreamDataUnidirectional = initialMaxStreamDataUnidirectional
            copy.initialMaxStreamsBidirectional = initialMaxStreamsBidirectional
            copy.initialMaxStreamsUnidirectional = initialMaxStreamsUnidirectional
            copy.maxUDPPayloadSize = maxUDPPayloadSize
            copy.isDatagram = isDatagram
            copy.maxDatagramFrameSize = maxDatagramFrameSize
            copy.direction = direction
            copy.tls = tls
            copy.qlogDirectory = qlogDirectory
            copy.requiresAddressValidation = requiresAddressValidation
            copy.addressValidationThreshold = addressValidationThreshold
            copy.acceptsEarlyData = acceptsEarlyData
            copy.tracksLosses = tracksLosses
            copy.congestionControl = congestionControl
            copy.loadBalancer = loadBalancer
            copy.disablesActiveMigration = disablesActiveMigration
            return copy
        }

        /// Lowers the options to the core's configuration.
        var configuration: QUICConfiguration {
            var configuration = QUICConfiguration()
            configuration.alpn = alpn
            configuration.idleTimeoutMilliseconds = UInt64(max(0, idleTimeout))
            configuration.initialMaxData = UInt64(max(0, initialMaxData))
            configuration.initialMaxStreamDataBidirectionalLocal = UInt64(max(0, initialMaxStreamDataBidirectionalLocal))
            configuration.initialMaxStreamDataBidirectionalRemote = UInt64(max(0, initialMaxStreamDataBidirectionalRemote))
            configuration.initialMaxStreamDataUnidirectional = UInt64(max(0, initialMaxStreamDataUnidirectional))
            configuration.initialMaxStreamsBidirectional = UInt64(max(0, initialMaxStreamsBidirectional))
            configuration.initialMaxStreamsUnidirectional = UInt64(max(0, initialMaxStreamsUnidirectional))
            configuration.maxUDPPayloadSize = max(1200, maxUDPPayloadSize)
            configuration.maxDatagramFrameSize = isDatagram ? UInt64(max(0, maxDatagramFrameSize)) : 0
            configuration.cipherSuites = tls.cipherSuites
            configuration.preSharedKeys = tls.preSharedKeys
            configuration.sessionTicketStore = tls.sessionTicketStore
            configuration.qlogDirectory = qlogDirectory
            configuration.tracksLosses = tracksLosses
            configuration.congestionControl = congestionControl
            configuration.disablesActiveMigration = disablesActiveMigration
            return configuration
        }
    }

    /// TLS settings for QUIC's handshake (RFC 9001). Clients verify against the system trust store
    /// unless told otherwise; servers need a certificate or generate a self-signed one.
    public struct TLSOptions: Sendable {
        /// How a client checks the server certificate.
        public var certificateVerification: CertificateVerification = .systemTrustStore
        /// SNI and the name to verify; defaults to the host when it is a name.
        public var serverName: String?
        /// Servers: PEM certificate chain and key files.
        public var certificateChainFile: String?
        /// Servers: the PEM private key of `certificateChainFile`; without it the listener's
        /// init throws.
        public var privateKeyFile: String?
        /// Servers: an in-memory identity, for example a `SelfSignedCertificate`.
        public var identity: SelfSignedCertificate?
        /// The TLS versions allowed, from `sec_protocol_options_set_min/max_tls_protocol_version`.
        /// QUIC needs TLS 1.3 (RFC 9001 §4.2); bounds that exclude it fail the start.
        public var minimumTLSVersion: tls_protocol_version_t?
        /// The highest TLS version allowed, nil for no bound; anything but TLS 1.3 fails the start.
        public var maximumTLSVersion: tls_protocol_version_t?
        /// The AEADs to offer (RFC 9001 §5.3).
        public var cipherSuites: [QUICCipherSuite] = QUICCipherSuite.allCases
        /// Clients: keep the session tickets servers send here and resume with them (RFC 8446
        /// §2.2): the next handshake to the same server skips the certificate. Nil: no resumption.
        public var sessionTicketStore: QUICSessionTicketStore?
        /// The identity `sec_protocol_options_set_local_identity` set: listeners present it, and
        /// clients present it when the server asks for a certificate (RFC 8446 §4.4.2).
        package var localIdentity: SecIdentity?
        /// The keys `sec_protocol_options_add_pre_shared_key` added, in order (RFC 8446 §4.2.11).
        package var preSharedKeys: [TLSPreSharedKey] = []

        /// Defaults: verify against the system trust store, offer every cipher suite, no
        /// certificate, no TLS version bounds and no session ticket store.
        public init() {}

        /// Why these options cannot make a QUIC handshake, or nil when they can.
        var configurationProblem: String? {
            // TLS 1.3 is the highest version there is, so any other maximum excludes it.
            if let maximum = maximumTLSVersion, maximum != .TLSv13 {
                return "QUIC needs TLS 1.3 (RFC 9001 §4.2), but the maximum TLS version is set to \(maximum)"
            }
            if let minimum = minimumTLSVersion, minimum.isDatagramTLS {
                return "QUIC needs TLS 1.3 (RFC 9001 §4.2), but the minimum TLS version is set to \(minimum)"
            }
            return nil
        }
    }
}

/// Parameters for a connection, group or listener: the protocol stack and local endpoint.
// @unchecked Sendable: filled in before use, as in Network.framework; read once at start.
public final class NWParameters: @unchecked Sendable {
    /// The protocols of the stack: QUIC's options among the application protocols, UDP's and
    /// IP's below them.
    public final class ProtocolStack: @unchecked Sendable {
        /// The stack's application protocol options, matching Apple's `applicationProtocols`;
        /// `quicOptions` is the first `NWProtocolQUIC.Options` among them.
        public var applicationProtocols: [NWProtocolOptions]
        /// UDP's options (`NWProtocolUDP.Options`), matching Apple's `transportProtocol`.
        public var transportProtocol: NWProtocolOptions?
        /// IP's options (`NWProtocolIP.Options`), matching Apple's `internetProtocol`: change
        /// the object's properties, as on Apple platforms.
        public let internetProtocol: NWProtocolOptions?

        init(applicationProtocols: [NWProtocolOptions]) {
            self.applicationProtocols = applicationProtocols
            transportProtocol = NWProtocolUDP.Options()
            internetProtocol = NWProtocolIP.Options()
        }
    }

    /// The protocol stack, matching Apple's `defaultProtocolStack`; `init(quic:)` puts the QUIC
    /// options in it.
    public let defaultProtocolStack: ProtocolStack
    /// For listeners: the address to bind (host and port); for clients: ignored.
    public var requiredLocalEndpoint: NWEndpoint?
    /// Clients: when resuming with a ticket from `tls.sessionTicketStore`, send the streams'
    /// first bytes in 0-RTT, before the handshake completes (RFC 9001 §4.6.1), as
    /// Network.framework does for QUIC with `allowFastOpen`. Early data can be replayed by an
    /// attacker (RFC 8446 §8): use it for requests that are safe to repeat. If the server refuses
    /// it, the same bytes are sent again in 1-RTT.
    public var allowFastOpen = false
    /// Interface rules, reuse and service class, as set through the members in
    /// NWParameters+Members.swift.
    var pathSettings = PathSettings()

    /// Parameters with an empty protocol stack, matching Apple's `init()`; what an `NWBrowser`
    /// takes. A group or listener made with them uses default QUIC options, which have no ALPN.
    public init() {
        defaultProtocolStack = ProtocolStack(applicationProtocols: [])
    }

    /// Parameters for QUIC with `options`, matching Apple's `NWParameters(quic:)`. The options are
    /// kept, not copied: groups and listeners copy them when they are made.
    public init(quic options: NWProtocolQUIC.Options) {
        defaultProtocolStack = ProtocolStack(applicationProtocols: [options])
    }

    /// QUIC with these ALPN protocol IDs and default options.
    public static func quic(alpn: [String]) -> NWParameters {
        NWParameters(quic: NWProtocolQUIC.Options(alpn: alpn))
    }

    /// QUIC with these ALPN protocol IDs and RFC 9221 datagrams offered (`isDatagram`), as
    /// Network.framework's `quicDatagram(alpn:)`.
    public static func quicDatagram(alpn: [String]) -> NWParameters {
        let options = NWProtocolQUIC.Options(alpn: alpn)
        options.isDatagram = true
        return NWParameters(quic: options)
    }

    /// The QUIC options in the stack.
    public var quicOptions: NWProtocolQUIC.Options {
        defaultProtocolStack.applicationProtocols.lazy.compactMap { $0 as? NWProtocolQUIC.Options }.first
            ?? NWProtocolQUIC.Options()
    }
}
