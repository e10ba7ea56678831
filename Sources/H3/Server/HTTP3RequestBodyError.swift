#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

/// Why a request body ended before the client's FIN, as a server handler reading it sees it.
public enum HTTP3RequestBodyError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The client reset the request stream (RESET_STREAM, RFC 9000 §19.4) with this code; the
    /// client cancelling is H3_REQUEST_CANCELLED (RFC 9114 §4.1.1).
    case clientReset(HTTP3ErrorCode)
    /// The QUIC connection ended first.
    case connectionClosed(String)

    public var description: String {
        switch self {
        case .clientReset(let code): return "the client reset the request with \(code)"
        case .connectionClosed(let reason): return "the connection closed before the request body ended: \(reason)"
        }
    }
}
