import CQuicShims

/// Why a connection could not migrate (RFC 9000 §9).
public enum QUICMigrationError: Error, Sendable, CustomStringConvertible {
    /// ngtcp2 would not start: the handshake is not confirmed, the server disabled active
    /// migration, or it issued no spare connection ID (its error code).
    case refused(Int32)
    /// The server did not answer PATH_CHALLENGE on the new path (RFC 9000 §8.2.4).
    case pathValidationFailed

    public var description: String {
        switch self {
        case .pathValidationFailed: return "migration failed: the new path did not validate (no PATH_RESPONSE)"
        case .refused(NGTCP2_ERR_CONN_ID_BLOCKED): return "cannot migrate: the server has issued no spare connection ID"
        case .refused(NGTCP2_ERR_INVALID_STATE): return "cannot migrate: the handshake is not confirmed or the server disabled active migration"
        case .refused(let code): return "cannot migrate: \(String(cString: ngtcp2_strerror(code)))"
        }
    }
}
