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

/// A response head and its streaming body.
public struct HTTP3Response: Sendable {
    /// The final response head: status and fields, without pseudo-fields; interim (1xx)
    /// responses are skipped. Built from the field section on first use.
    public var head: HTTPResponse { source.head }
    /// The final response's status (RFC 9114 §4.3.2), read without building ``head``.
    public var status: HTTPResponse.Status { source.status }
    /// The response body, streamed as it arrives; its trailers follow it.
    public let body: HTTP3ResponseBody
    /// The connection the response came on.
    public let connection: HTTP3ConnectionInfo
    /// The received field section; `HTTPSession` reads Alt-Svc from it without the head.
    let source: HTTP3ResponseHeadSource

    init(source: HTTP3ResponseHeadSource, body: HTTP3ResponseBody, connection: HTTP3ConnectionInfo) {
        self.source = source
        self.body = body
        self.connection = connection
    }

    /// Changes the priority of the rest of this response (RFC 9218 §7: PRIORITY_UPDATE).
    public func updatePriority(_ priority: HTTPPriority) async throws {
        try await body.exchange.updatePriority(priority)
    }

    /// The connection's establishment report and its data-transfer report since it began.
    public func statistics() async -> HTTP3ConnectionStatistics? {
        await body.exchange.statistics()
    }
}
