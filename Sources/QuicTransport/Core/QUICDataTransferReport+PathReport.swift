import CQuicShims
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension QUICDataTransferReport {
    /// What one path carried, as Network.framework's `DataTransferReport.PathReport`, with
    /// QUIC's figures: IP packets are UDP datagrams, transport bytes are UDP payload bytes
    /// (QUIC packets, headers and all), application bytes are stream bytes.
    public struct PathReport: Sendable, Equatable {
        /// UDP datagrams received.
        public let receivedIPPacketCount: UInt64
        /// UDP datagrams sent.
        public let sentIPPacketCount: UInt64
        /// UDP payload bytes received: QUIC packets, headers included.
        public let receivedTransportByteCount: UInt64
        /// Always 0: ngtcp2 0.12 does not report the stream bytes it received twice.
        public let receivedTransportDuplicateByteCount: UInt64
        /// Always 0: ngtcp2 0.12 does not report the stream bytes it received out of order.
        public let receivedTransportOutOfOrderByteCount: UInt64
        /// UDP payload bytes sent: QUIC packets, headers included.
        public let sentTransportByteCount: UInt64
        /// Bytes of the packets the loss detector declared lost (RFC 9002 §6.1), which recovery
        /// sends again; 0 unless the connection tracks losses (`tracksLosses` or qlog).
        public let sentTransportRetransmittedByteCount: UInt64
        /// The smoothed RTT at collection, in seconds (RFC 9002 §5.3).
        public let transportSmoothedRTT: TimeInterval
        /// The smallest RTT sample so far, in seconds (RFC 9002 §5.2); 0 before the first sample.
        public let transportMinimumRTT: TimeInterval
        /// The RTT variation, `rttvar`, at collection, in seconds (RFC 9002 §5.3).
        public let transportRTTVariance: TimeInterval
        /// Stream bytes delivered to the application in order (for HTTP/3, its frames).
        public let receivedApplicationByteCount: UInt64
        /// Stream bytes the application sent, counted once when first sent (for HTTP/3, its
        /// frames); retransmissions are not counted again.
        public let sentApplicationByteCount: UInt64
        /// The local address of the path, which names its interface.
        private let localAddress: QUICSocketAddress

        /// The interface the path leaves through: the one that holds its local address, or one
        /// with an empty name and index 0 when none does (the address was removed).
        public var interface: NWInterface { NWInterface.owning(localAddress) ?? NWInterface(name: "") }

        init(_ interval: QUICTransferCounters, statistics: ngtcp2_conn_stat, tracksLosses: Bool, local: QUICSocketAddress) {
            receivedIPPacketCount = interval.receivedDatagrams
            sentIPPacketCount = interval.sentDatagrams
            receivedTransportByteCount = interval.receivedBytes
            receivedTransportDuplicateByteCount = 0
            receivedTransportOutOfOrderByteCount = 0
            sentTransportByteCount = interval.sentBytes
            sentTransportRetransmittedByteCount = tracksLosses ? interval.lostBytes : 0
            transportSmoothedRTT = Duration.ngtcp2(statistics.smoothed_rtt).timeInterval
            transportMinimumRTT = Duration.ngtcp2(statistics.min_rtt).timeInterval
            transportRTTVariance = Duration.ngtcp2(statistics.rttvar).timeInterval
            receivedApplicationByteCount = interval.receivedStreamBytes
            sentApplicationByteCount = interval.sentStreamBytes
            localAddress = local
        }
    }

    /// The paths' counts summed, as Network.framework's `aggregatePathReport`; with one path
    /// (always, here), that path's report.
    public var aggregatePathReport: PathReport { pathReports[0] }
}

extension QUICDataTransferReport {
    /// A report of an interval in which the connection carried nothing: it had not started (or
    /// had already ended) when the interval began. Times are nanoseconds on the connection clock.
    static func empty(since start: UInt64, until end: UInt64) -> QUICDataTransferReport {
        QUICDataTransferReport(
            duration: Duration.nanoseconds(Int64(end > start ? end - start : 0)).timeInterval,
            pathReports: [PathReport(QUICTransferCounters(), statistics: ngtcp2_conn_stat(), tracksLosses: false, local: QUICSocketAddress(ip: "0.0.0.0", port: 0)!)],
            sentBytes: 0, receivedBytes: 0, sentPackets: 0, receivedPackets: 0, lostPackets: nil, retransmittedBytes: nil,
            smoothedRTT: .zero, minimumRTT: .zero, latestRTT: .zero, rttVariance: .zero,
            congestionWindow: 0, peakCongestionWindow: 0, keyUpdates: 0, pathChanges: 0
        )
    }
}
