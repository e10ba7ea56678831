/// TLS over TCP beside QUIC: the options and metadata of Network.framework's `NWProtocolTLS`,
/// for `NWParameters(tls:tcp:)` and `NWParameters.tls`. GnuTLS runs it, as it runs QUIC's
/// handshake, over the TCP byte stream (RFC 8446 for 1.3, RFC 5246 for 1.2).
// @unchecked Sendable: a namespace with no stored instance state, as Apple's class is.
public final class NWProtocolTLS: @unchecked Sendable {
    /// TLS's definition, matching Apple's `NWProtocolTLS.definition`.
    public static let definition = NWProtocolDefinition(name: "tls")

    /// TLS options, matching Apple's `NWProtocolTLS.Options`: change them through
    /// `securityProtocolOptions` with the same `sec_protocol_options_*` calls as QUIC's (verify
    /// block, ALPN, TLS versions, local identity), or through `tls`.
    // @unchecked Sendable: a configuration object filled in on one thread before use.
    public final class Options: NWProtocolOptions, @unchecked Sendable {
        /// Where the `sec_protocol_options_*` calls write: QUIC's options type carries the same
        /// ALPN list and TLS settings, so one set of Security calls serves both.
        let storage = NWProtocolQUIC.Options()

        /// Default TLS options: verify against the system trust store, TLS 1.2 or 1.3, no ALPN.
        override public init() {}

        /// The TLS options, for Security's `sec_protocol_options_*` calls; they change these
        /// options, matching Apple's `securityProtocolOptions`.
        public var securityProtocolOptions: sec_protocol_options_t { sec_protocol_options_t(options: storage) }

        /// Certificates, verification (trust store, CA file, pinned SHA-256, verify block),
        /// server name and TLS versions, as QUIC's options carry them. An addition, for the
        /// pinning and PEM files Linux apps use where Apple's use the keychain.
        public var tls: NWProtocolQUIC.TLSOptions {
            get { storage.tls }
            set { storage.tls = newValue }
        }

        /// The ALPN protocol IDs to offer or accept, in preference order (RFC 7301); what
        /// `sec_protocol_options_add_tls_application_protocol` adds to.
        public var alpn: [String] {
            get { storage.alpn }
            set { storage.alpn = newValue }
        }
    }

    /// What a TLS connection's handshake settled, matching Apple's `NWProtocolTLS.Metadata`.
    // @unchecked Sendable: immutable.
    public final class Metadata: NWProtocolMetadata, @unchecked Sendable {
        /// The negotiated ALPN protocol and the server name, for `sec_protocol_metadata_*` calls.
        public let securityProtocolMetadata: sec_protocol_metadata_t

        init(securityProtocolMetadata: sec_protocol_metadata_t) {
            self.securityProtocolMetadata = securityProtocolMetadata
        }

        override public var definition: NWProtocolDefinition { NWProtocolTLS.definition }
    }
}

extension NWProtocolUDP {
    /// What a UDP datagram carries besides its bytes, matching Apple's `NWProtocolUDP.Metadata`:
    /// nothing, as on Apple platforms. Received datagrams' contexts hold one.
    // @unchecked Sendable: no stored state.
    public final class Metadata: NWProtocolMetadata, @unchecked Sendable {
        /// Empty UDP metadata, matching Apple's `init()`.
        override public init() {}

        override public var definition: NWProtocolDefinition { NWProtocolUDP.definition }
    }
}
