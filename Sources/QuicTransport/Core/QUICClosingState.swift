import CQuicShims

/// What a connection keeps to close (RFC 9000 §10.2): why it ended, the error it closes with, and once it
/// has entered the closing period, its CONNECTION_CLOSE packet as bytes, sent again in answer to
/// late packets (§10.2.1) after ngtcp2's state is gone.
struct QUICClosingState {
    /// Why the connection ended, once it has; set once.
    var reason: QUICCloseReason?
    /// The peer's stateless reset arrived (ngtcp2's `recv_stateless_reset`, RFC 9000 §10.3): the
    /// draining that follows is a reset, not a close.
    var receivedStatelessReset = false
    /// The code and reason CONNECTION_CLOSE carries; ngtcp2's default (NO_ERROR) until set.
    var error: ngtcp2_connection_close_error
    /// The CONNECTION_CLOSE packet, written once on entering the closing period.
    private(set) var packet: [UInt8] = []
    /// Whether `packet` should go out with the next write.
    private(set) var isPacketDue = false
    private var packetsSent = 0

    /// Answers to late packets in the closing period, at most (RFC 9000 §10.2.1 asks for a bound).
    private static let maximumPackets = 16

    init() {
        error = ngtcp2_connection_close_error()
        ngtcp2_connection_close_error_default(&error)
    }

    /// Writes CONNECTION_CLOSE with `error` and keeps it to send; false when ngtcp2 wrote nothing.
    mutating func writePacket(conn: OpaquePointer, now: UInt64) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 1500)
        var pathStorage = ngtcp2_path_storage()
        ngtcp2_path_storage_zero(&pathStorage)
        var info = ngtcp2_pkt_info()
        let n = cqs_ngtcp2_conn_write_connection_close(conn, &pathStorage.path, &info, &buffer, buffer.count, &error, now)
        guard n > 0 else { return false }
        packet = Array(buffer.prefix(n))
        isPacketDue = true
        return true
    }

    /// A packet arrived in the closing period: answer it, a bounded number of times.
    mutating func answerLatePacket() {
        if packetsSent < Self.maximumPackets { isPacketDue = true }
    }

    /// Takes the due packet for sending: counts it and clears the flag.
    mutating func takeDuePacket() {
        isPacketDue = false
        packetsSent += 1
    }
}
