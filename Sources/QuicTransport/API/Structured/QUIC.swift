
/// QUIC (RFC 9000) as a protocol stack for `NetworkConnection` and `NetworkListener`, as in
/// Network.framework's 2025 API:
/// `QUIC(alpn: ["my-protocol"]).idleTimeout(10_000).tls.peerAuthentication(.required)`.
///
/// Each modifier returns a changed copy. They lower to the same `NWProtocolQUIC.Options` the
/// classic API uses, so both faces run the same engine with the same settings.
public struct QUIC: Sendable {
    /// The options this stack lowers to; copied whenever a modifier changes one.
    private var storage: NWProtocolQUIC.Options
    /// The TLS 1.3 handshake's settings (RFC 9001): identity, peer authentication, ciphers.
    public private(set) var tlsSettings: QuicTransport.TLS

    /// The UDP (and IP) settings below QUIC.
    private let udp: UDP

    /// QUIC offering these ALPN protocol IDs, in order of preference (RFC 9001 §8.1).
    public init(alpn: [String]) {
        self.init(alpn: alpn) { UDP() }
    }

    /// QUIC over `builder`'s UDP, as Apple's `init(alpn:_:)`:
    /// `QUIC(alpn: ["x"]) { UDP { IP().version(.v6).hopLimit(16) } }`.
    public init(alpn: [String], @ProtocolStackBuilder<UDP> _ builder: () -> UDP) {
        storage = NWProtocolQUIC.Options(alpn: alpn)
        tlsSettings = QuicTransport.TLS()
        udp = builder()
    }

    /// The TLS handshake's modifiers, each returning the changed `QUIC`, as on Apple platforms:
    /// `QUIC(alpn: ["x"]).tls.localIdentity(identity).tls.peerAuthentication(.none)`.
    public var tls: QUIC.TLS { QUIC.TLS(quic: self) }

    /// The ALPN protocol IDs offered.
    public var alpn: [String] { storage.alpn }

    /// Whether the stack offers RFC 9221 datagrams.
    var datagramsEnabled: Bool { storage.isDatagram }

    /// The classic options these settings lower to: a fresh copy each time.
    package var options: NWProtocolQUIC.Options {
        let options = storage.copy()
        tlsSettings.apply(to: &options.tls)
        return options
    }

    /// Classic parameters for this stack: the QUIC options, and the UDP and IP options below.
    package var parameters: NWParameters {
        let parameters = NWParameters(quic: options)
        udp.apply(to: parameters.defaultProtocolStack)
        return parameters
    }

    private func with(_ change: (NWProtocolQUIC.Options) -> Void) -> QUIC {
        var copy = self
        copy.storage = storage.copy()
        change(copy.storage)
        return copy
    }

    private static func milliseconds(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        return Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000)
    }

    /// `max_idle_timeout` (RFC 9000 §10.1) in milliseconds, as Apple spells it; 30 s by default.
    public func idleTimeout(_ milliseconds: Int) -> QUIC { with { $0.idleTimeout = milliseconds } }

    /// `max_idle_timeout` as a `Duration`. An addition.
    public func idleTimeout(_ timeout: Duration) -> QUIC { idleTimeout(Self.milliseconds(timeout)) }

    /// `initial_max_data` (RFC 9000 §18.2): bytes the peer may send on the whole connection.
    public func initialMaxData(_ bytes: Int) -> QUIC { with { $0.initialMaxData = bytes } }

    /// `initial_max_stream_data_bidi_local`: bytes the peer may send on each bidirectional
    /// stream this side opens.
    public func initialMaxStreamDataBidirectionalLocal(_ bytes: Int) -> QUIC {
        with { $0.initialMaxStreamDataBidirectionalLocal = bytes }
    }

    /// `initial_max_stream_data_bidi_remote`: bytes the peer may send on each bidirectional
    /// stream it opens.
    public func initialMaxStreamDataBidirectionalRemote(_ bytes: Int) -> QUIC {
        with { $0.initialMaxStreamDataBidirectionalRemote = bytes }
    }

    /// `initial_max_stream_data_uni`: bytes the peer may send on each unidirectional stream.
    public func initialMaxStreamDataUnidirectional(_ bytes: Int) -> QUIC {
        with { $0.initialMaxStreamDataUnidirectional = bytes }
    }

    /// `initial_max_streams_bidi`: how many bidirectional streams the peer may open.
    public func initialMaxBidirectionalStreams(_ count: Int) -> QUIC { with { $0.initialMaxStreamsBidirectional = count } }

    /// `initial_max_streams_uni`: how many unidirectional streams the peer may open.
    public func initialMaxUnidirectionalStreams(_ count: Int) -> QUIC { with { $0.initialMaxStreamsUnidirectional = count } }

    /// The largest UDP payload to send (RFC 9000 §14); 1452 by default.
    public func maxUDPPayloadSize(_ bytes: Int) -> QUIC { with { $0.maxUDPPayloadSize = bytes } }

    /// Offers RFC 9221 datagrams up to this frame size (`max_datagram_frame_size`); 0 turns
    /// them off, the default.
    public func maxDatagramFrameSize(_ bytes: Int) -> QUIC {
        with {
            $0.isDatagram = bytes > 0
            $0.maxDatagramFrameSize = bytes
        }
    }

    /// A copy with changed TLS settings; `QUIC.TLS`'s modifiers call it.
    fileprivate func withTLS(_ change: (inout QuicTransport.TLS) -> Void) -> QUIC {
        var copy = self
        change(&copy.tlsSettings)
        return copy
    }

    /// The TLS modifiers of a `QUIC` stack, reached through `quic.tls`; each returns the
    /// changed `QUIC`, so they chain: `.tls.localIdentity(id).tls.cipherSuites([...])`.
    public struct TLS: Sendable {
        fileprivate let quic: QUIC

        /// The certificate and key this side presents during the QUIC handshake, as Apple's
        /// `localIdentity(_:)`: make it with `sec_identity_create(_:)` from a `SecIdentity` that
        /// `SecPKCS12Import` returned. A listener without one generates a self-signed certificate
        /// for `localhost`; a client presents it when the server asks (RFC 8446 §4.3.2).
        public func localIdentity(_ identity: sec_identity_t) -> QUIC {
            quic.withTLS { $0.localIdentity = .identity(identity) }
        }

        /// The certificate and key this side presents, as PEM files or an in-memory certificate.
        /// An addition.
        public func localIdentity(_ identity: QuicTransport.TLS.LocalIdentity) -> QUIC {
            quic.withTLS { $0.localIdentity = identity }
        }

        /// How this side checks the peer's certificate; `.required` (the system trust store) by
        /// default for clients.
        public func peerAuthentication(_ authentication: QuicTransport.TLS.PeerAuthentication) -> QUIC {
            quic.withTLS { $0.peerAuthentication = authentication }
        }

        /// Lets `handler` decide whether to trust the peer, with Apple's shape for
        /// `certificateValidator(_:)`: it gets the handshake's metadata and the peer's chain
        /// (`sec_trust_copy_ref` and `SecTrustCopyCertificateChain` open it) and returns `true`
        /// to go on. It replaces any other peer authentication, so the system trust store is not
        /// consulted. Linux note: the handshake waits for the answer for at most
        /// `CertificateVerifier.answerTimeout`.
        public func certificateValidator(
            _ handler: @escaping @isolated(any) @Sendable (sec_protocol_metadata_t, sec_trust_t) async -> Bool
        ) -> QUIC {
            quic.withTLS {
                $0.peerAuthentication = .verify { peer in
                    await handler(sec_protocol_metadata_t(peer: peer), sec_trust_t(peer: peer))
                }
            }
        }

        /// The AEADs to offer (RFC 9001 §5.3), in order of preference.
        public func cipherSuites(_ suites: [QUICCipherSuite]) -> QUIC { quic.withTLS { $0.cipherSuites = suites } }

        /// The name sent as SNI and verified, when not the endpoint's host. An addition.
        public func serverName(_ name: String?) -> QUIC { quic.withTLS { $0.serverName = name } }

        /// Clients: keep session tickets here and resume with them (RFC 8446 §2.2). An addition.
        public func sessionTicketStore(_ store: QUICSessionTicketStore?) -> QUIC {
            quic.withTLS { $0.sessionTicketStore = store }
        }
    }

    // MARK: Additions

    /// Writes a qlog trace per connection into `directory` (`<odcid>_<client|server>.sqlog`).
    /// An addition; without it, `$QLOGDIR` decides.
    public func qlogDirectory(_ directory: String?) -> QUIC { with { $0.qlogDirectory = directory } }

    /// The congestion controller; CUBIC by default. An addition.
    public func congestionControl(_ algorithm: QUICCongestionControl) -> QUIC { with { $0.congestionControl = algorithm } }

    /// Listeners: accept 0-RTT from resuming clients (RFC 9001 §4.6.1); early data can be
    /// replayed (RFC 8446 §8). An addition.
    public func acceptsEarlyData(_ accepts: Bool = true) -> QUIC { with { $0.acceptsEarlyData = accepts } }

    /// Listeners: validate every client's address with Retry first (RFC 9000 §8.1.2). An addition.
    public func requiresAddressValidation(_ requires: Bool = true) -> QUIC { with { $0.requiresAddressValidation = requires } }
}

/// TLS 1.3 for QUIC's handshake (RFC 9001), as Network.framework's `TLS` protocol: who we are,
/// how we check the peer, and which ciphers we offer. Clients verify against the system trust
/// store by default.
public struct TLS: Sendable {
    /// How a client authenticates the server.
    public enum PeerAuthentication: Sendable {
        /// Against the system trust store, with the host's name: the default. Apple spells it
        /// `.required`.
        case systemTrustStore
        /// Against the CA certificates in this PEM file.
        case certificateAuthorities(file: String)
        /// The leaf certificate's SHA-256 must be this (32 bytes).
        case pinnedSHA256([UInt8])
        /// A closure decides, as Security's verify block does.
        case verify(@Sendable (CertificateVerifier.Peer) async -> Bool)
        /// Nothing is checked: for testing only.
        case none

        /// The peer must present a certificate the system trust store accepts: Apple's spelling
        /// of `.systemTrustStore`.
        public static var required: PeerAuthentication { .systemTrustStore }

        /// A pin written as hex, with or without colons, as `openssl x509 -fingerprint -sha256`
        /// and our tools print it; throws `TLSError.invalidPin` for anything else.
        public static func pinnedSHA256(hex: String) throws -> PeerAuthentication {
            let pin = try CertificateVerification.pinnedSHA256(hex: hex)
            guard case .pinnedSHA256(let digest) = pin else { preconditionFailure("a parsed pin is a pin") }
            return .pinnedSHA256(digest)
        }
    }

    /// The certificate and key this side presents; a listener without one generates a
    /// self-signed certificate for `localhost`.
    public enum LocalIdentity: Sendable {
        /// PEM files of a certificate chain and its private key.
        case files(certificateChain: String, privateKey: String)
        /// An in-memory certificate, for example a `SelfSignedCertificate`.
        case certificate(SelfSignedCertificate)
        /// A Security identity, for example from `SecPKCS12Import`.
        case identity(sec_identity_t)
    }

    /// What this side presents; nil for none.
    public var localIdentity: LocalIdentity?
    /// How the peer is checked.
    public var peerAuthentication: PeerAuthentication = .systemTrustStore
    /// The AEADs to offer (RFC 9001 §5.3), AES-128-GCM first.
    public var cipherSuites: [QUICCipherSuite] = QUICCipherSuite.allCases
    /// The name sent as SNI and verified; the host's by default.
    public var serverName: String?
    /// Clients: keep session tickets here and resume with them (RFC 8446 §2.2). An addition.
    public var sessionTicketStore: QUICSessionTicketStore?

    /// Defaults: no identity, system trust, every cipher suite.
    public init() {}

    /// Lowers these settings onto the classic options.
    func apply(to options: inout NWProtocolQUIC.TLSOptions) {
        switch localIdentity {
        case .files(let chain, let key)?:
            options.certificateChainFile = chain
            options.privateKeyFile = key
        case .certificate(let identity)?:
            options.identity = identity
        case .identity(let identity)?:
            options.localIdentity = identity.identity
        case nil:
            break
        }
        switch peerAuthentication {
        case .systemTrustStore: options.certificateVerification = .systemTrustStore
        case .certificateAuthorities(let file): options.certificateVerification = .caFile(file)
        case .pinnedSHA256(let digest): options.certificateVerification = .pinnedSHA256(digest)
        case .none: options.certificateVerification = .insecure
        case .verify(let decide):
            options.certificateVerification = .custom(CertificateVerifier { peer, answer in
                Task { answer(await decide(peer)) }
            })
        }
        options.cipherSuites = cipherSuites
        options.serverName = serverName
        options.sessionTicketStore = sessionTicketStore
    }
}
