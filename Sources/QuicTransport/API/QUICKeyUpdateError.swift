import CQuicShims

/// A key update could not start now (RFC 9001 §6: not before the handshake is confirmed, and not
/// while the previous update is unacknowledged), or did not complete. `description` gives the
/// reason, ngtcp2's or ours.
public struct QUICKeyUpdateError: Error, Sendable, CustomStringConvertible {
    let code: Int32
    /// Why, when it is not ngtcp2's word for `code`.
    let reason: String?

    init(code: Int32, reason: String? = nil) {
        self.code = code
        self.reason = reason
    }

    /// The connection ended while its key update was under way.
    package static let connectionEnded = QUICKeyUpdateError(code: NGTCP2_ERR_CLOSING)

    /// The update did not complete, for `reason`.
    package static func didNotComplete(_ reason: String) -> QUICKeyUpdateError {
        QUICKeyUpdateError(code: NGTCP2_ERR_INVALID_STATE, reason: reason)
    }

    public var description: String {
        if let reason { return "the key update did not complete: \(reason)" }
        if code == NGTCP2_ERR_CLOSING { return "the key update did not complete: the connection closed first" }
        return "cannot update keys now: \(String(cString: ngtcp2_strerror(code)))"
    }
}
