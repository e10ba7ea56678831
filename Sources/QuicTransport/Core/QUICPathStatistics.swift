import CQuicShims
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

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
    /// Seconds from the successful attempt's first Initial to handshake completion (RFC 9001
    /// §4.1.1), as Network.framework's `duration` (preparing to ready).
    public var duration: TimeInterval
    /// Seconds from `start(queue:)` to the start of the successful attempt: name resolution and
    /// any earlier attempts. Zero for a listener's connections.
    public var attemptStartedAfterInterval: TimeInterval
    /// Attempts on earlier addresses that were refused, unreachable or silent before this one.
    public var previousAttemptCount: Int
    /// The name resolutions made (one getaddrinfo query); empty for a numeric address or a
    /// listener's connection.
    public var resolutions: [Resolution]
    /// The protocol handshakes, lowest first: one, QUIC's, which carries TLS 1.3 (RFC 9001).
    public var handshakes: [Handshake]
    /// Always nil: connections here never go through a proxy.
    public var proxyEndpoint: NWEndpoint?
    /// Always false: there is no proxy configuration on Linux.
    public var proxyConfigured: Bool
    /// Always false: connections here never go through a proxy.
    public var usedProxy: Bool
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
        let duration = Duration.nanoseconds(Int64(completedAt &- handshake.startedAt)).timeInterval
        let attempts = handshake.attempts
        return QUICEstablishmentReport(
            duration: duration,
            attemptStartedAfterInterval: attempts.startedAt.map {
                Duration.nanoseconds(Int64(handshake.startedAt > $0 ? handshake.startedAt - $0 : 0)).timeInterval
            } ?? 0,
            previousAttemptCount: attempts.previousAttemptCount,
            resolutions: attempts.resolution.map { [QUICEstablishmentReport.Resolution($0, successful: path.remote)] } ?? [],
            handshakes: [QUICEstablishmentReport.Handshake(definition: NWProtocolQUIC.definition, handshakeDuration: duration, handshakeRTT: handshake.rtt.timeInterval)],
            proxyEndpoint: nil,
            proxyConfigured: false,
            usedProxy: false,
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
