#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import AsyncHTTPClient
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import QuicTransport

/// The HTTP version a response came over, spelled as curl's `%{http_version}` prints it.
public enum HTTPVersionUsed: String, Sendable {
    /// HTTP/1.1 over TLS and TCP (RFC 9112).
    case http1_1 = "1.1"
    /// HTTP/2 over TLS and TCP (RFC 9113).
    case http2 = "2"
    /// HTTP/3 over QUIC (RFC 9114).
    case http3 = "3"
}
