import CQuicShims

/// Stream limits, keep-alive and the negotiated figures that QUIC metadata reports.
extension QUICConnectionCore {
    /// Bytes a short-header packet spends around a DATAGRAM frame's payload: flags, the longest
    /// connection ID, the longest packet number, the AEAD tag (RFC 9000 §17.3, RFC 9001 §5.3), and
    /// the frame's type and a two-byte length (RFC 9221 §4).
    private static let datagramPacketOverhead = 1 + 20 + 4 + 16 + 1 + 2

    /// The largest datagram payload that fits the peer's `max_datagram_frame_size` and one packet
    /// on the current path (RFC 9221 §3, §5); 0 when datagrams are not negotiated.
    package var usableDatagramFrameSize: Int {
        guard isHandshakeCompleted, isDatagramNegotiated, let conn,
            let peer = ngtcp2_conn_get_remote_transport_params(conn)?.pointee
        else { return 0 }
        // max_datagram_frame_size counts the frame's type and length fields as well.
        let frameLimit = Int(clamping: peer.max_datagram_frame_size) - 1 - 2
        let packetLimit = ngtcp2_conn_get_path_max_tx_udp_payload_size(conn) - Self.datagramPacketOverhead
        return max(0, min(frameLimit, packetLimit))
    }

    /// What QUIC metadata reports of this connection now.
    var tunnelFigures: QUICTunnelFigures {
        guard let conn else { return lastFigures.tunnelFigures }
        var figures = QUICTunnelFigures()
        figures.localMaxStreamsBidirectional = localMaxStreams(bidirectional: true)
        figures.localMaxStreamsUnidirectional = localMaxStreams(bidirectional: false)
        guard isHandshakeCompleted else { return figures }
        figures.remoteIdleTimeoutMilliseconds = remoteIdleTimeoutMilliseconds
        // MAX_STREAMS counts every stream ever opened (RFC 9000 §4.6): those opened plus those left.
        figures.remoteMaxStreamsBidirectional = rawStreams.locallyOpened.bidirectional + ngtcp2_conn_get_streams_bidi_left(conn)
        figures.remoteMaxStreamsUnidirectional = rawStreams.locallyOpened.unidirectional + ngtcp2_conn_get_streams_uni_left(conn)
        figures.usableDatagramFrameSize = usableDatagramFrameSize
        return figures
    }

    /// Lets the peer open `count` more streams of a kind: MAX_STREAMS goes out with the next packet.
    func grantPeerStreams(bidirectional: Bool, _ count: UInt64) {
        guard count > 0 else { return }
        if bidirectional {
            ngtcp2_conn_extend_max_streams_bidi(conn, Int(clamping: count))
            rawStreams.peerCreditGranted.bidirectional += count
        } else {
            ngtcp2_conn_extend_max_streams_uni(conn, Int(clamping: count))
            rawStreams.peerCreditGranted.unidirectional += count
        }
    }

    /// How many streams of a kind this side has let the peer open in all (RFC 9000 §4.6).
    func localMaxStreams(bidirectional: Bool) -> UInt64 {
        bidirectional
            ? configuration.initialMaxStreamsBidirectional + rawStreams.peerCreditGranted.bidirectional
            : configuration.initialMaxStreamsUnidirectional + rawStreams.peerCreditGranted.unidirectional
    }

    /// Raises the peer's cumulative stream limit of a kind to `limit`; a lower value changes
    /// nothing, since limits never decrease (RFC 9000 §4.6).
    package func raisePeerStreamLimit(bidirectional: Bool, to limit: UInt64) {
        guard state == .handshaking || state == .established else { return }
        let current = localMaxStreams(bidirectional: bidirectional)
        // MAX_STREAMS may not exceed 2^60 (RFC 9000 §19.11).
        let target = min(limit, 1 << 60)
        if target > current { grantPeerStreams(bidirectional: bidirectional, target - current) }
    }

    /// Sends a PING after `milliseconds` without traffic, so that idle timeouts do not end the
    /// connection (RFC 9000 §10.1.2): nil for half the idle timeout in force (at least a second;
    /// 15 s when neither side has one), 0 to turn it off. Rearm the timer afterwards.
    func setKeepAlive(milliseconds: UInt64?) {
        guard let conn else { return }
        let interval = milliseconds ?? (effectiveIdleTimeoutMilliseconds > 0 ? max(1000, effectiveIdleTimeoutMilliseconds / 2) : 15_000)
        ngtcp2_conn_set_keep_alive_timeout(conn, interval * UInt64(NGTCP2_MILLISECONDS))
        keepAliveMilliseconds = interval
    }

    /// The peer's `max_idle_timeout` in milliseconds (RFC 9000 §18.2); 0 before the handshake.
    private var remoteIdleTimeoutMilliseconds: UInt64 {
        guard isHandshakeCompleted, let conn, let peer = ngtcp2_conn_get_remote_transport_params(conn) else { return 0 }
        return peer.pointee.max_idle_timeout / UInt64(NGTCP2_MILLISECONDS)
    }

    /// The idle timeout in force, in milliseconds: the lower of both sides' nonzero
    /// `max_idle_timeout` (RFC 9000 §10.1); 0 when neither side has one.
    private var effectiveIdleTimeoutMilliseconds: UInt64 {
        [configuration.idleTimeoutMilliseconds, remoteIdleTimeoutMilliseconds].filter { $0 > 0 }.min() ?? 0
    }
}

/// What a connection's accessors report once its C state is released
/// (`QUICConnectionCore.releaseConnectionState()`): the figures at that moment.
struct QUICConnectionLastFigures {
    var isHandshakeCompleted = false
    var negotiatedVersion: UInt32 = 0
    var negotiatedALPN: String?
    var cipherName: String?
    var isDatagramNegotiated = false
    var statistics = ngtcp2_conn_stat()
    var tunnelFigures = QUICTunnelFigures()
}

/// The negotiated figures of a tunnel that QUIC metadata reports, read from the connection.
struct QUICTunnelFigures: Sendable, Equatable {
    var remoteIdleTimeoutMilliseconds: UInt64 = 0
    var remoteMaxStreamsBidirectional: UInt64 = 0
    var remoteMaxStreamsUnidirectional: UInt64 = 0
    var localMaxStreamsBidirectional: UInt64 = 0
    var localMaxStreamsUnidirectional: UInt64 = 0
    var usableDatagramFrameSize = 0
}
