import CQuicShims

/// How a connection paces its packets (RFC 9002 §7.7) and the limits of one write pass: the
/// state `QUICConnectionCore.writePackets` keeps from pass to pass. Each pass gathers its
/// packets into GSO batches with a `QUICPacketBatch`.
struct QUICPacketWriter {
    /// ngtcp2 has measured an RTT on the current path: packets are paced from then on.
    private var hasRTTSample = false

    /// ngtcp2's `NGTCP2_PKT_PACING_OVERHEAD`: a packet whose pacing time is this close is sent
    /// now, as an event loop cannot time finer than that.
    static let pacingOverhead: UInt64 = 1_000_000

    /// Vectors offered to each `ngtcp2_conn_writev_stream` call. One packet takes about 1,400
    /// bytes, so a frame header and a piece of one body chunk are what it uses; nghttp3 and
    /// ngtcp2 both walk every vector offered on each call, so offering more only costs a walk
    /// over chunks the packet has no room for.
    static let vectorsPerWrite = 4

    /// The connection moved to a new path, where ngtcp2 may have started the RTT estimate afresh
    /// (RFC 9000 §9.4): pacing waits for its first sample again.
    mutating func pathChanged() {
        hasRTTSample = false
    }

    /// Sets when ngtcp2 may send the next packet, from what this pass sent (RFC 9002 §7.7), once
    /// there is an RTT sample to pace by.
    ///
    /// Before its first sample ngtcp2 0.12 paces at the initial RTT (333 ms): the client's first
    /// Initial alone would hold its next packet, the handshake's Finished, for tens of
    /// milliseconds after the server's reply is in, and a move to a new path, which starts the
    /// RTT estimate afresh, would stall the same way. ngtcp2 1.x assumes 1 ms until its first
    /// sample; not pacing until then comes to the same. The bytes sent before count towards the
    /// first interval.
    mutating func updatePacing(conn: OpaquePointer, now: UInt64) {
        if !hasRTTSample {
            var stat = ngtcp2_conn_stat()
            cqs_ngtcp2_conn_get_conn_stat(conn, &stat)
            guard stat.first_rtt_sample_ts != .max else { return }
            hasRTTSample = true
        }
        ngtcp2_conn_update_pkt_tx_time(conn, now)
    }
}
