import CQuicShims

/// Why a connection could not migrate (RFC 9000 §9). Compare `code` to tell the reasons apart;
/// new codes may be added.
public struct QUICMigrationError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of migration failure an error is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case noSpareConnectionID, notAllowed, connectionClosing, refused, pathValidationFailed
        }

        private let base: Base

        private init(_ base: Base) { self.base = base }

        /// The server has issued no connection ID to spare for the new path (RFC 9000 §9.5).
        public static let noSpareConnectionID = Code(.noSpareConnectionID)
        /// The handshake is not confirmed yet, or the server disabled active migration
        /// (`disable_active_migration`, RFC 9000 §18.2).
        public static let notAllowed = Code(.notAllowed)
        /// The connection is closing or closed.
        public static let connectionClosing = Code(.connectionClosing)
        /// The QUIC implementation refused to start the migration for another reason, given in
        /// `context`.
        public static let refused = Code(.refused)
        /// The server did not answer PATH_CHALLENGE on the new path (RFC 9000 §8.2.4).
        public static let pathValidationFailed = Code(.pathValidationFailed)

        public var description: String { "\(base)" }
    }

    /// What went wrong.
    public var code: Code
    /// Detail beyond the code, such as the QUIC implementation's own words.
    public var context: String?

    init(code: Code, context: String? = nil) {
        self.code = code
        self.context = context
    }

    /// The server did not answer PATH_CHALLENGE on the new path.
    public static let pathValidationFailed = QUICMigrationError(code: .pathValidationFailed)

    /// Why ngtcp2 would not start a migration, from its error code.
    init(ngtcp2 rv: Int32) {
        switch rv {
        case NGTCP2_ERR_CONN_ID_BLOCKED: self.init(code: .noSpareConnectionID)
        case NGTCP2_ERR_INVALID_STATE: self.init(code: .notAllowed)
        case NGTCP2_ERR_CLOSING: self.init(code: .connectionClosing, context: String(cString: ngtcp2_strerror(rv)))
        default: self.init(code: .refused, context: String(cString: ngtcp2_strerror(rv)))
        }
    }

    public var description: String {
        switch code {
        case .pathValidationFailed: "migration failed: the new path did not validate (no PATH_RESPONSE)"
        case .noSpareConnectionID: "cannot migrate: the server has issued no spare connection ID"
        case .notAllowed: "cannot migrate: the handshake is not confirmed or the server disabled active migration"
        default: "cannot migrate: \(context ?? code.description)"
        }
    }
}
