import CQuicShims

/// A snapshot of one path's recovery state (RFC 9002 §5).
public struct QUICPathStatistics: Sendable, Equatable {
    public var smoothedRTT: Duration
    public var minimumRTT: Duration
    public var latestRTT: Duration
    public var congestionWindow: Int
    public var bytesInFlight: Int
}

extension QUICConnectionCore {
    /// The current recovery figures from ngtcp2's `ngtcp2_conn_stat`.
    package var pathStatistics: QUICPathStatistics {
        let stat = statistics
        return QUICPathStatistics(
            smoothedRTT: .nanoseconds(Int64(stat.smoothed_rtt)),
            minimumRTT: .nanoseconds(Int64(stat.min_rtt)),
            latestRTT: .nanoseconds(Int64(stat.latest_rtt)),
            congestionWindow: Int(stat.cwnd),
            bytesInFlight: Int(stat.bytes_in_flight)
        )
    }
}

/// How a connection came to be (Network.framework's establishment report, for QUIC).
public struct QUICEstablishmentReport: Sendable, Equatable {
    /// From the first Initial to handshake completion (RFC 9001 §4.1.1).
    public var duration: Duration
    /// The smoothed round-trip time when the handshake completed (RFC 9002 §5.3).
    public var handshakeRTT: Duration
    /// TLS session resumption and 0-RTT; both false until resumption arrives (the interop issue).
    public var resumed: Bool
    public var usedZeroRTT: Bool
    public var alpn: String?
    /// The AEAD, for example `AES-128-GCM` (RFC 9001 §5.3).
    public var cipherSuite: String?
    /// The negotiated QUIC version (1 for RFC 9000).
    public var quicVersion: UInt32
}

extension QUICConnectionCore {
    /// The establishment figures, once the handshake has completed.
    package var establishmentReport: QUICEstablishmentReport? {
        guard let completedAt = handshakeCompletedAt else { return nil }
        return QUICEstablishmentReport(
            duration: .nanoseconds(Int64(completedAt &- startedAt)),
            handshakeRTT: handshakeRTT,
            resumed: false,
            usedZeroRTT: false,
            alpn: negotiatedALPN,
            cipherSuite: cipherName,
            quicVersion: negotiatedVersion
        )
    }
}
