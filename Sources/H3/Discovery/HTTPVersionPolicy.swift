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

/// How a session chooses between HTTP/3 and TCP, with URLSession's and curl's meanings.
public enum HTTPVersionPolicy: String, Sendable, CaseIterable {
    /// Use HTTP/3 once it is known to work for the origin: an `Alt-Svc` cache entry (RFC 7838)
    /// or a DNS HTTPS record with `alpn=h3` (RFC 9460). Otherwise use TCP and learn from the
    /// response's `Alt-Svc`, so the next request goes over HTTP/3. URLSession's default, and
    /// h3get's `--http3-after-discovery`.
    case discovery
    /// Try HTTP/3 first; if its handshake has not finished after a short delay, race TCP and
    /// take whichever is ready first (URLRequest's `assumesHTTP3Capable`, Happy Eyeballs).
    /// curl's `--http3`, and h3get's default. A live `Alt-Svc` cache entry names where.
    case assumesHTTP3Capable
    /// HTTP/3 or a clear failure, never TCP (curl's `--http3-only`). A live `Alt-Svc` cache
    /// entry names where.
    case http3Only
}
