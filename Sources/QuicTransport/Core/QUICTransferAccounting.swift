/// A connection's traffic accounting for data-transfer reports: the running totals
/// (`QUICTransferCounters`), the losses read from ngtcp2's recovery records (`QUICLossLedger`),
/// and the largest congestion window over the whole connection and over each open report.
struct QUICTransferAccounting {
    var counters = QUICTransferCounters()
    var lossLedger = QUICLossLedger()
    /// Reports started and not yet collected.
    var marks: [QUICDataTransferMark] = []
    /// The largest congestion window so far.
    var peakCongestionWindow: UInt64 = 0

    /// Counts a loss if `record`, one of ngtcp2's qlog records, declares one (RFC 9002 §6.1).
    mutating func observe(qlogRecord record: UnsafeRawBufferPointer) {
        if case .lost(let bytes) = lossLedger.observe(record) {
            counters.lostPackets += 1
            counters.lostBytes += UInt64(bytes)
        }
    }

    /// Folds the current congestion window into the lifetime peak and every open report.
    mutating func notePeak(congestionWindow window: UInt64) {
        if window > peakCongestionWindow { peakCongestionWindow = window }
        for mark in marks where window > mark.peakCongestionWindow { mark.peakCongestionWindow = window }
    }
}
