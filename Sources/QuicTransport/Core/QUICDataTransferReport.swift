import CQuicShims
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What a connection carried over an interval (Network.framework's data-transfer report, for
/// QUIC): traffic, losses, RTT (RFC 9002 §5) and the congestion window (RFC 9002 §7).
public struct QUICDataTransferReport: Sendable, Equatable {
    /// The interval in seconds, from `startDataTransferReport()` to `collect`.
    public var duration: TimeInterval
    /// One report per path, as Network.framework's `pathReports`: a QUIC connection here uses
    /// one path at a time, so this holds one report, for the path in use at collection, with
    /// the whole interval's counts (`pathChanges` says whether the path moved).
    public var pathReports: [PathReport]
    /// UDP payload bytes, and datagrams (IP packets) as Network.framework counts them.
    public var sentBytes: UInt64
    /// UDP payload bytes received in the interval.
    public var receivedBytes: UInt64
    /// UDP datagrams sent in the interval; one datagram may hold several QUIC packets.
    public var sentPackets: UInt64
    /// UDP datagrams received in the interval; one datagram may hold several QUIC packets.
    public var receivedPackets: UInt64
    /// Packets the loss detector declared lost (RFC 9002 §6.1), and their bytes: what recovery
    /// had to send again. Nil unless the connection tracks losses (`tracksLosses` or qlog).
    public var lostPackets: UInt64?
    /// The bytes of `lostPackets`, which recovery sends again; nil unless losses are tracked.
    public var retransmittedBytes: UInt64?
    /// The smoothed RTT at collection (RFC 9002 §5.3).
    public var smoothedRTT: Duration
    /// The smallest RTT sample of the connection so far (RFC 9002 §5.2); zero before the first
    /// sample.
    public var minimumRTT: Duration
    /// The latest RTT sample at collection (RFC 9002 §5.1).
    public var latestRTT: Duration
    /// The RTT variation, `rttvar`, at collection (RFC 9002 §5.3).
    public var rttVariance: Duration
    /// The congestion window at collection, and the largest it was during the interval.
    public var congestionWindow: Int
    /// The largest congestion window during the interval, in bytes.
    public var peakCongestionWindow: Int
    /// 1-RTT key updates completed in the interval, by either side (RFC 9001 §6).
    public var keyUpdates: UInt64
    /// Times the connection moved to a new path: NAT rebinding or migration (RFC 9000 §9).
    public var pathChanges: UInt64
}

/// The start of a data-transfer report: counters at that moment, and the peak congestion window
/// seen since. Lives in the core, which updates the peak as acknowledgements move the window.
package final class QUICDataTransferMark {
    let startedAt: UInt64
    let counters: QUICTransferCounters
    var peakCongestionWindow: UInt64

    init(startedAt: UInt64, counters: QUICTransferCounters, congestionWindow: UInt64) {
        self.startedAt = startedAt
        self.counters = counters
        self.peakCongestionWindow = congestionWindow
    }
}

extension QUICConnectionCore {
    /// Starts a report at `now` (`NWConnection.startDataTransferReport()`).
    package func startDataTransferReport(now: UInt64) -> QUICDataTransferMark {
        latestTime = max(latestTime, now)
        let mark = QUICDataTransferMark(startedAt: latestTime, counters: transfer.counters, congestionWindow: statistics.cwnd)
        transfer.marks.append(mark)
        return mark
    }

    /// Ends the report begun at `mark` at `now` (`PendingDataTransferReport.collect`).
    package func collectDataTransferReport(_ mark: QUICDataTransferMark, now: UInt64) -> QUICDataTransferReport {
        latestTime = max(latestTime, now)
        notePeakCongestionWindow()
        transfer.marks.removeAll { $0 === mark }
        return dataTransferReport(since: mark.counters, startedAt: mark.startedAt, peak: mark.peakCongestionWindow)
    }

    /// Everything since the connection began, for `--stats`.
    package var lifetimeDataTransferReport: QUICDataTransferReport {
        dataTransferReport(since: QUICTransferCounters(), startedAt: handshake.startedAt, peak: transfer.peakCongestionWindow)
    }

    private func dataTransferReport(since start: QUICTransferCounters, startedAt: UInt64, peak: UInt64) -> QUICDataTransferReport {
        let stat = statistics
        let interval = transfer.counters.since(start)
        return QUICDataTransferReport(
            duration: Duration.nanoseconds(Int64(latestTime &- startedAt)).timeInterval,
            pathReports: [QUICDataTransferReport.PathReport(interval, statistics: stat, tracksLosses: tracksLosses, local: path.local)],
            sentBytes: interval.sentBytes,
            receivedBytes: interval.receivedBytes,
            sentPackets: interval.sentDatagrams,
            receivedPackets: interval.receivedDatagrams,
            lostPackets: tracksLosses ? interval.lostPackets : nil,
            retransmittedBytes: tracksLosses ? interval.lostBytes : nil,
            smoothedRTT: .ngtcp2(stat.smoothed_rtt),
            minimumRTT: .ngtcp2(stat.min_rtt),
            latestRTT: .ngtcp2(stat.latest_rtt),
            rttVariance: .ngtcp2(stat.rttvar),
            congestionWindow: Int(stat.cwnd),
            peakCongestionWindow: Int(max(peak, stat.cwnd)),
            keyUpdates: interval.keyUpdates,
            pathChanges: interval.pathChanges
        )
    }

    /// Folds the current congestion window into the lifetime peak and every open report.
    func notePeakCongestionWindow() {
        transfer.notePeak(congestionWindow: statistics.cwnd)
    }
}
