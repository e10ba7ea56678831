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

/// Failures that are the session's own, as opposed to HTTP/3's (`HTTP3ClientError`): the TCP
/// fallback's, by how far it got, and the two together when both versions failed.
public indirect enum HTTPSessionError: Error, Sendable, CustomStringConvertible {
    /// The host name did not resolve for TCP.
    case tcpCannotResolve(String)
    /// No TCP connection: refused, unreachable, or not answered in time.
    case tcpCannotConnect(String)
    /// The TLS handshake over TCP failed for a reason other than the certificate.
    case tcpTLSFailed(String)
    /// The server's certificate was refused on the TCP path.
    case tcpCertificateRejected(String)
    /// The TCP request failed once connected.
    case tcp(String)
    /// TCP cannot be used for this request at all.
    case tcpUnavailable(String)
    /// HTTP/3 was tried and failed, and so did TCP.
    case bothFailed(http3: HTTP3ClientError, tcp: HTTPSessionError)

    public var description: String {
        switch self {
        case .tcpCannotResolve(let reason), .tcpCannotConnect(let reason): return "cannot connect: \(reason)"
        case .tcpTLSFailed(let reason), .tcpCertificateRejected(let reason), .tcp(let reason): return reason
        case .tcpUnavailable(let reason): return "no TCP fallback: \(reason)"
        case .bothFailed(let http3, let tcp): return "HTTP/3 failed (\(http3)) and TCP failed (\(tcp))"
        }
    }
}
