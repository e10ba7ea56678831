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

/// Why a session tried HTTP/3 for a request.
public enum HTTP3Discovery: String, Sendable {
    /// A live `Alt-Svc` cache entry named `h3` (RFC 7838 §2.2).
    case altSvcCache = "Alt-Svc cache"
    /// A DNS HTTPS record listed `h3` in its `alpn` (RFC 9460 §7.1).
    case httpsRecord = "HTTPS record"
    /// The policy assumed it (`assumesHTTP3Capable`).
    case assumed
    /// The policy demands it (`http3Only`).
    case required
}
