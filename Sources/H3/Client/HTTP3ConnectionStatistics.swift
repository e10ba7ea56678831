#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import CQuicShims
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport
import Synchronization

/// A QUIC connection's reports, as Network.framework gives them (see `NWConnectionGroup`).
public struct HTTP3ConnectionStatistics: Sendable {
    /// How the connection was established; nil until its handshake has completed.
    public let establishment: QUICEstablishmentReport?
    /// What the connection has sent and received since it began.
    public let transfer: QUICDataTransferReport
}
