import CQuicShims

/// An AEAD cipher suite a QUIC connection may negotiate (RFC 9001 §5.3).
public enum QUICCipherSuite: String, Sendable, CaseIterable {
    /// TLS_AES_128_GCM_SHA256: AEAD_AES_128_GCM (RFC 9001 §5.3).
    case aes128GCM = "aes128gcm"
    /// TLS_AES_256_GCM_SHA384: AEAD_AES_256_GCM (RFC 9001 §5.3).
    case aes256GCM = "aes256gcm"
    /// TLS_CHACHA20_POLY1305_SHA256: AEAD_CHACHA20_POLY1305 (RFC 9001 §5.3).
    case chacha20Poly1305 = "chacha20"

    /// The GnuTLS priority-string token.
    var gnutlsToken: String {
        switch self {
        case .aes128GCM: return "+AES-128-GCM"
        case .aes256GCM: return "+AES-256-GCM"
        case .chacha20Poly1305: return "+CHACHA20-POLY1305"
        }
    }
}

/// A congestion controller ngtcp2 0.12 implements (RFC 9002 §7 for Reno; CUBIC is RFC 9438).
public enum QUICCongestionControl: String, Sendable, CaseIterable {
    /// CUBIC (RFC 9438), the default.
    case cubic
    /// NewReno, the controller RFC 9002 §7 describes.
    case reno
    /// BBR, ngtcp2 0.12's implementation of version 1.
    case bbr
    /// BBRv2, ngtcp2 0.12's implementation.
    case bbr2

    var ngtcp2: ngtcp2_cc_algo {
        switch self {
        case .cubic: return NGTCP2_CC_ALGO_CUBIC
        case .reno: return NGTCP2_CC_ALGO_RENO
        case .bbr: return NGTCP2_CC_ALGO_BBR
        case .bbr2: return NGTCP2_CC_ALGO_BBR2
        }
    }
}

/// Everything a connection core needs to know before its first packet, for either role.
///
/// The public `NWProtocolQUIC.Options` lowers to this value; the core never sees the public API.
package struct QUICConfiguration: Sendable {
    /// ALPN protocol IDs in preference order (RFC 9001 §8.1). At least one is required.
    package var alpn: [String] = []
    /// `max_idle_timeout` (RFC 9000 §10.1), in milliseconds; 0 disables it.
    package var idleTimeoutMilliseconds: UInt64 = 30_000
    package var initialMaxData: UInt64 = 16 << 20
    package var initialMaxStreamDataBidirectionalLocal: UInt64 = 4 << 20
    package var initialMaxStreamDataBidirectionalRemote: UInt64 = 4 << 20
    package var initialMaxStreamDataUnidirectional: UInt64 = 4 << 20
    package var initialMaxStreamsBidirectional: UInt64 = 100
    package var initialMaxStreamsUnidirectional: UInt64 = 100
    /// The largest UDP payload this endpoint will send (RFC 9000 §14).
    package var maxUDPPayloadSize: Int = 1452
    /// What the sockets under the connection ask of IP and UDP: DF, hop limit, IP version.
    package var socket = QUICSocketOptions()
    /// `max_datagram_frame_size` (RFC 9221 §3); 0 means datagrams are not offered.
    package var maxDatagramFrameSize: UInt64 = 0
    /// Upper bounds for ngtcp2's flow-control window auto-tuning.
    package var maxConnectionWindow: UInt64 = 64 << 20
    package var maxStreamWindow: UInt64 = 32 << 20
    /// How long a handshake may take in all. Generous, because under heavy loss the PTO backs off
    /// (RFC 9002 §6.2.1): with 30% loss both ways, 10 s failed 1 handshake in 50, and a server
    /// that gives up before its client does leaves the client with keys nobody holds any more
    /// (it sees a stateless reset, or an idle timeout). The idle timeout still applies.
    package var handshakeTimeoutMilliseconds: UInt64 = 60_000
    package var cipherSuites: [QUICCipherSuite] = QUICCipherSuite.allCases
    /// External pre-shared keys (RFC 8446 §4.2.11): a client offers the first, a server accepts
    /// any by identity. Empty: certificates only.
    package var preSharedKeys: [TLSPreSharedKey] = []
    /// Servers: an address the client may move to once the handshake is confirmed, advertised
    /// as `preferred_address` (RFC 9000 §9.6). The endpoint must also receive there.
    package var preferredAddress: QUICSocketAddress?
    package var congestionControl: QUICCongestionControl = .cubic
    /// Send `disable_active_migration` (RFC 9000 §18.2): the peer must not move to another
    /// address on its own (NAT rebinding can still move it). For servers behind a balancer that
    /// routes by the 4-tuple only.
    package var disablesActiveMigration = false
    /// Clients: where session tickets are kept for resumption (RFC 8446 §2.2); nil for none.
    package var sessionTicketStore: QUICSessionTicketStore?
    /// Clients: send stream data in 0-RTT when resuming with remembered transport parameters.
    package var attemptsEarlyData = false
    /// Directory for `<odcid>_<role>.sqlog` traces; nil writes none.
    package var qlogDirectory: String?
    /// Count lost packets and their bytes for data-transfer reports. ngtcp2 0.12 reports losses
    /// only as qlog events, and formatting those for every packet costs about a third of peak
    /// throughput, so this is off unless asked for; a qlog directory turns it on anyway.
    package var tracksLosses = false
    /// Mirror ngtcp2's debug log into the logger at trace level.
    package var ngtcp2DebugLogging = false

    package init() {}

    /// Every default in one place: the public options (`NWProtocolQUIC.Options`) start from it.
    package static let defaults = QUICConfiguration()

    /// The GnuTLS priority string: TLS 1.3 only, the chosen AEADs, no middlebox compatibility
    /// mode, which QUIC forbids (RFC 9001 §8.4), and the PSK key exchanges when there are keys.
    var gnutlsPriority: String {
        let ciphers = (cipherSuites.isEmpty ? QUICCipherSuite.allCases : cipherSuites).map(\.gnutlsToken)
        let base = (["NORMAL", "-VERS-ALL", "+VERS-TLS1.3", "-CIPHER-ALL"] + ciphers
            + ["-GROUP-ALL", "+GROUP-X25519", "+GROUP-SECP256R1", "+GROUP-SECP384R1", "%DISABLE_TLS13_COMPAT_MODE"])
            .joined(separator: ":")
        return preSharedKeys.isEmpty ? base : base + PreSharedKeyCredentials.priorityAddition(server: false)
    }
}

/// The TLS side of a client connection.
package struct QUICClientTLS: Sendable {
    package var credentials: TLSCredentials
    package var verification: CertificateVerification
    /// The name sent as SNI and checked against the certificate; nil for IP literals.
    package var serverName: String?
    /// The name or address the certificate must match.
    package var verificationName: String
    /// Where this server's session tickets are kept, and under which key (`name:port`).
    package var ticketStore: QUICSessionTicketStore?
    package var ticketKey: String = ""

    package init(
        credentials: TLSCredentials,
        verification: CertificateVerification,
        serverName: String?,
        verificationName: String
    ) {
        self.credentials = credentials
        self.verification = verification
        self.serverName = serverName
        self.verificationName = verificationName
    }
}
