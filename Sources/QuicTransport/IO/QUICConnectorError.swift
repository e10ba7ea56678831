/// Why a client connector refused a request about its connection: the I/O layer's own error,
/// which the API layer turns into `NWError` (`NWError.init(_:)`).
package enum QUICConnectorError: Error, Equatable, CustomStringConvertible {
    /// There is no connection, or it has ended (`ENOTCONN`).
    case notConnected
    /// A migration is under way already (`EALREADY`).
    case alreadyMigrating

    package var description: String {
        switch self {
        case .notConnected: return "not connected"
        case .alreadyMigrating: return "a migration is already under way"
        }
    }
}
