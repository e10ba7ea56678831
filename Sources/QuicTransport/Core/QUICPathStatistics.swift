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
