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

/// Errors an HTTP/3 request can end with. The cases before the connection is up say how far it
/// got (name resolution, a QUIC answer, the TLS handshake, the certificate), so a caller can act
/// on them without reading messages; h3get maps them to curl's exit codes.
public enum HTTP3ClientError: Error, Sendable, CustomStringConvertible {
    /// The request cannot go over HTTP/3: it has no host, or its scheme is not `https`.
    case invalidRequest(String)
    /// The host name did not resolve.
    case cannotResolve(String)
    /// No QUIC server answered: the port was refused (ICMP port unreachable) or the network
    /// unreachable.
    case cannotConnect(String)
    /// The handshake did not finish in time: no answer, or no complete one (RFC 9000 §10.1).
    case handshakeTimedOut(String)
    /// The TLS handshake failed for a reason other than the server's certificate: a TLS alert
    /// either side sent as a CRYPTO_ERROR (RFC 9001 §4.8), such as no common ALPN.
    case tlsHandshakeFailed(String)
    /// This client refused the server's certificate: untrusted, expired, for another name, or
    /// not matching a pin (RFC 9001 §4.4).
    case certificateRejected(String)
    /// The connection failed for another reason: an error close after the handshake, or before
    /// it one that is neither TLS nor a timeout (stateless reset, no common QUIC version).
    case connectionFailed(String)
    /// The connection closed cleanly before the request finished.
    case connectionClosed(String)
    /// The request stream was reset or closed with this error code (RFC 9114 §8.1).
    case streamReset(HTTP3ErrorCode)
    /// The exchange broke HTTP/3's rules or could not be submitted: a response without a valid
    /// `:status`, or a stream that ended before its response did.
    case protocolError(String)
    /// The caller cancelled the request, which was reset with H3_REQUEST_CANCELLED.
    case cancelled
    /// The server did not process the request (GOAWAY or H3_REQUEST_REJECTED); safe to retry.
    case requestRejected

    public var description: String {
        switch self {
        case .invalidRequest(let reason): return "invalid request: \(reason)"
        case .cannotResolve(let reason), .cannotConnect(let reason), .handshakeTimedOut(let reason): return "cannot connect: \(reason)"
        case .tlsHandshakeFailed(let reason), .certificateRejected(let reason): return reason
        case .connectionFailed(let reason): return "connection failed: \(reason)"
        case .connectionClosed(let reason): return "connection closed: \(reason)"
        case .streamReset(let code): return "the server reset the request with \(code)"
        case .protocolError(let reason): return "HTTP/3 error: \(reason)"
        case .cancelled: return "request cancelled"
        case .requestRejected: return "the server rejected the request before processing it (H3_REQUEST_REJECTED or GOAWAY)"
        }
    }

    /// Why a connector gave up before any handshake could finish.
    init(_ failure: QUICClientConnector.Failure) {
        switch failure {
        case .resolution: self = .cannotResolve(failure.description)
        case .refused, .unreachable, .setup: self = .cannotConnect(failure.description)
        case .silent: self = .handshakeTimedOut(failure.description)
        }
    }

    /// Why a connection ended with requests unfinished: a clean close, a handshake that failed
    /// (certificate, TLS alert, timeout), or another failure.
    init(closedBy reason: QUICCloseReason, beforeHandshake: Bool) {
        switch reason {
        case _ where reason.isNoError: self = .connectionClosed(Self.describe(reason))
        case _ where !beforeHandshake: self = .connectionFailed(Self.describe(reason))
        case .handshakeFailed(_, _, .some): self = .certificateRejected(reason.description)
        case .handshakeFailed: self = .tlsHandshakeFailed(reason.description)
        case _ where reason.isCryptoError: self = .tlsHandshakeFailed("TLS handshake failed: \(reason)")
        case .handshakeTimeout, .idleTimeout: self = .handshakeTimedOut(reason.description)
        default: self = .connectionFailed(Self.describe(reason))
        }
    }

    /// A close reason with HTTP/3 error codes named (RFC 9114 §8.1).
    static func describe(_ reason: QUICCloseReason) -> String {
        switch reason {
        case .localApplicationClose(let code, let text):
            return "closed locally with \(HTTP3ErrorCode(rawValue: code))" + (text.isEmpty ? "" : ": \(text)")
        case .peerApplicationClose(let code, let text):
            return "the server closed the connection with \(HTTP3ErrorCode(rawValue: code))" + (text.isEmpty ? "" : ": \(text)")
        default:
            return "\(reason)"
        }
    }
}
