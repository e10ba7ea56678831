import CQuicShims

/// A snapshot of one path's recovery state (RFC 9002 §5).
public struct QUICPathStatistics: Sendable, Equatable {
    /// The smoothed round-trip time (RFC 9002 §5.3).
    public var smoothedRTT: Duration
    /// The smallest RTT sample of the connection (RFC 9002 §5.2); zero before the first sample.
    public var minimumRTT: Duration
    /// The latest RTT sample (RFC 9002 §5.1).
    public var latestRTT: Duration
    /// The congestion window, in bytes (RFC 9002 §7).
    public var congestionWindow: Int
    /// Bytes in flight (RFC 9002 §2): sent in packets not yet acknowledged or declared lost.
    public var bytesInFlight: Int
}

extension QUICConnectionCore {
    /// The current recovery figures from ngtcp2's `ngtcp2_conn_stat`.
    package var pathStatistics: QUICPathStatistics {
        let stat = statistics
        return QUICPathStatistics(
            smoothedRTT: .ngtcp2(stat.smoothed_rtt),
            minimumRTT: .ngtcp2(stat.min_rtt),
            latestRTT: .ngtcp2(stat.latest_rtt),
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
    /// Whether the handshake resumed a TLS session from a ticket (RFC 8446 §2.2).
    public var resumed: Bool
    /// Whether this client sent 0-RTT data and the server accepted it (RFC 9001 §4.6). Clients
    /// only: a server's report says false even when it accepted early data.
    public var usedZeroRTT: Bool
    /// The negotiated ALPN protocol ID (RFC 9001 §8.1), or nil if none was negotiated.
    public var alpn: String?
    /// The AEAD, for example `AES-128-GCM` (RFC 9001 §5.3).
    public var cipherSuite: String?
    /// The negotiated QUIC version (1 for RFC 9000).
    public var quicVersion: UInt32
}

extension QUICConnectionCore {
    /// The establishment figures, once the handshake has completed.
    package var establishmentReport: QUICEstablishmentReport? {
        guard let completedAt = handshake.completedAt else { return nil }
        return QUICEstablishmentReport(
            duration: .nanoseconds(Int64(completedAt &- handshake.startedAt)),
            handshakeRTT: handshake.rtt,
            resumed: wasResumed,
            usedZeroRTT: earlyDataAttempted && earlyDataAccepted,
            alpn: negotiatedALPN,
            cipherSuite: cipherName,
            quicVersion: negotiatedVersion
        )
    }
}

extension Duration {
    /// An ngtcp2 duration in nanoseconds; ngtcp2 marks "no sample yet" (`min_rtt` before the
    /// first RTT sample) with UINT64_MAX, which becomes zero here rather than a trap.
    static func ngtcp2(_ nanoseconds: UInt64) -> Duration {
        nanoseconds > UInt64(Int64.max) ? .zero : .nanoseconds(Int64(nanoseconds))
    }
}
