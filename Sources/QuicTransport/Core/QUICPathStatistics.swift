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
