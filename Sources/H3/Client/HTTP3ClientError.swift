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

/// An error an HTTP/3 request can end with. Its `code` says how far the request got (name
/// resolution, a QUIC answer, the TLS handshake, the certificate), so a caller can act on it
/// without reading messages; h3get maps codes to curl's exit codes. New codes may be added, so
/// compare `code` with `==` and keep a default.
public struct HTTP3ClientError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of failure an error is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case invalidRequest, cannotResolve, cannotConnect, handshakeTimedOut, tlsHandshakeFailed
            case certificateRejected, connectionFailed, connectionClosed, streamReset, protocolError
            case cancelled, requestRejected
        }

        private let base: Base

        private init(_ base: Base) { self.base = base }

        /// The request cannot go over HTTP/3: it has no host, or its scheme is not `https`.
        public static let invalidRequest = Code(.invalidRequest)
        /// The host name did not resolve.
        public static let cannotResolve = Code(.cannotResolve)
        /// No QUIC server answered: the port was refused (ICMP port unreachable) or the network
        /// unreachable.
        public static let cannotConnect = Code(.cannotConnect)
        /// The handshake did not finish in time: no answer, or no complete one (RFC 9000 §10.1).
        public static let handshakeTimedOut = Code(.handshakeTimedOut)
        /// The TLS handshake failed for a reason other than the server's certificate: a TLS alert
        /// either side sent as a CRYPTO_ERROR (RFC 9001 §4.8), such as no common ALPN.
        public static let tlsHandshakeFailed = Code(.tlsHandshakeFailed)
        /// This client refused the server's certificate: untrusted, expired, for another name, or
        /// not matching a pin (RFC 9001 §4.4); `verificationFailure` says which.
        public static let certificateRejected = Code(.certificateRejected)
        /// The connection failed for another reason: an error close after the handshake, or
        /// before it one that is neither TLS nor a timeout (stateless reset, no common QUIC
        /// version).
        public static let connectionFailed = Code(.connectionFailed)
        /// The connection closed cleanly before the request finished.
        public static let connectionClosed = Code(.connectionClosed)
        /// The request stream was reset or closed with an error code (RFC 9114 §8.1);
        /// `streamErrorCode` gives it.
        public static let streamReset = Code(.streamReset)
        /// The exchange broke HTTP/3's rules or could not be submitted: a response without a
        /// valid `:status`, or a stream that ended before its response did.
        public static let protocolError = Code(.protocolError)
        /// The caller cancelled the request, which was reset with H3_REQUEST_CANCELLED.
        public static let cancelled = Code(.cancelled)
        /// The server did not process the request (GOAWAY or H3_REQUEST_REJECTED); safe to retry.
        public static let requestRejected = Code(.requestRejected)

        public var description: String { "\(base)" }
    }

    /// What kind of failure this is.
    public var code: Code
    /// What happened, in words: the reason behind the code.
    public var context: String?
    /// The HTTP/3 error code the stream was reset with, for `.streamReset`.
    public var streamErrorCode: HTTP3ErrorCode?
    /// Why the certificate was refused, for `.certificateRejected` on a failed verification.
    public var verificationFailure: TLSVerificationFailure?

    init(
        code: Code,
        context: String? = nil,
        streamErrorCode: HTTP3ErrorCode? = nil,
        verificationFailure: TLSVerificationFailure? = nil
    ) {
        self.code = code
        self.context = context
        self.streamErrorCode = streamErrorCode
        self.verificationFailure = verificationFailure
    }

    /// The request cannot go over HTTP/3, for `reason`.
    static func invalidRequest(_ reason: String) -> HTTP3ClientError { HTTP3ClientError(code: .invalidRequest, context: reason) }
    /// The connection failed, for `reason`.
    static func connectionFailed(_ reason: String) -> HTTP3ClientError { HTTP3ClientError(code: .connectionFailed, context: reason) }
    /// The connection closed cleanly before the request finished, for `reason`.
    static func connectionClosed(_ reason: String) -> HTTP3ClientError { HTTP3ClientError(code: .connectionClosed, context: reason) }
    /// The exchange broke HTTP/3's rules, for `reason`.
    static func protocolError(_ reason: String) -> HTTP3ClientError { HTTP3ClientError(code: .protocolError, context: reason) }
    /// The request stream was reset with `code`.
    static func streamReset(_ code: HTTP3ErrorCode) -> HTTP3ClientError { HTTP3ClientError(code: .streamReset, streamErrorCode: code) }
    /// The caller cancelled the request.
    static let cancelled = HTTP3ClientError(code: .cancelled)
    /// The server did not process the request; safe to retry.
    static let requestRejected = HTTP3ClientError(code: .requestRejected)

    public var description: String {
        let reason = context ?? code.description
        switch code {
        case .invalidRequest: return "invalid request: \(reason)"
        case .cannotResolve, .cannotConnect, .handshakeTimedOut: return "cannot connect: \(reason)"
        case .tlsHandshakeFailed, .certificateRejected: return reason
        case .connectionFailed: return "connection failed: \(reason)"
        case .connectionClosed: return "connection closed: \(reason)"
        case .streamReset: return "the server reset the request with \(streamErrorCode.map { "\($0)" } ?? reason)"
        case .protocolError: return "HTTP/3 error: \(reason)"
        case .cancelled: return "request cancelled"
        case .requestRejected: return "the server rejected the request before processing it (H3_REQUEST_REJECTED or GOAWAY)"
        default: return reason
        }
    }

    /// Why a connector gave up before any handshake could finish.
    init(_ failure: QUICClientConnector.Failure) {
        switch failure {
        case .resolution: self.init(code: .cannotResolve, context: failure.description)
        case .refused, .unreachable, .setup: self.init(code: .cannotConnect, context: failure.description)
        case .silent: self.init(code: .handshakeTimedOut, context: failure.description)
        }
    }

    /// Why a connection ended with requests unfinished: a clean close, a handshake that failed
    /// (certificate, TLS alert, timeout), or another failure.
    init(closedBy reason: QUICCloseReason, beforeHandshake: Bool) {
        switch reason {
        case _ where reason.isNoError: self.init(code: .connectionClosed, context: Self.describe(reason))
        case _ where !beforeHandshake: self.init(code: .connectionFailed, context: Self.describe(reason))
        case .handshakeFailed(_, _, .some(let failure)):
            self.init(code: .certificateRejected, context: reason.description, verificationFailure: failure)
        case .handshakeFailed: self.init(code: .tlsHandshakeFailed, context: reason.description)
        case _ where reason.isCryptoError: self.init(code: .tlsHandshakeFailed, context: "TLS handshake failed: \(reason)")
        case .handshakeTimeout, .idleTimeout: self.init(code: .handshakeTimedOut, context: reason.description)
        default: self.init(code: .connectionFailed, context: Self.describe(reason))
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
