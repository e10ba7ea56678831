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

/// Facts about the connection a response came on.
public struct HTTP3ConnectionInfo: Sendable {
    /// The ALPN protocol TLS negotiated (`h3`); nil if the handshake had not completed.
    public let alpn: String?
    /// The connection's qlog trace file; nil when qlog is off (no `qlogDirectory`).
    public let qlogPath: String?
    /// When and where the connection was established; nil if its handshake had not completed.
    public let establishment: HTTP3ConnectionEstablishment?
    /// Whether the connection was opened for this request (curl's `num_connects`), rather
    /// than found open.
    public let openedForRequest: Bool

    init(alpn: String?, qlogPath: String?, establishment: HTTP3ConnectionEstablishment? = nil, openedForRequest: Bool = false) {
        (self.alpn, self.qlogPath, self.establishment, self.openedForRequest) = (alpn, qlogPath, establishment, openedForRequest)
    }
}
