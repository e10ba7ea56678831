#if canImport(Glibc)
import Glibc
#endif

/// Errors reported through states and completions, as in Network.framework, plus a `.quic` case
/// that carries QUIC's own error codes.
public enum NWError: Error, Equatable, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// A POSIX error code, as in Network.framework: `ECANCELED` after a cancel, `ENOTCONN` before
    /// a tunnel exists, `ECONNREFUSED`, `ENETUNREACH` or `ETIMEDOUT` when connecting fails, a
    /// listener's bind error, or `ECONNRESET` for a send abandoned by a stream reset.
    case posix(POSIXErrorCode)
    /// The host name could not be resolved. Linux note: the code is a `getaddrinfo` `EAI_*` code,
    /// where Apple gives a `DNSServiceErrorType`; Bonjour failures (browsing, advertising,
    /// resolving a `.service`) give a `DNSServiceErrorType` (-65537 and below), as Apple does.
    case dns(Int32)
    /// A TLS error code, as in Network.framework: for TLS over TCP (and refused DTLS), GnuTLS's
    /// negative code where Apple gives an `OSStatus`. QUIC's TLS failures are `.quic` errors of
    /// kind `.handshakeFailed`.
    case tls(Int32)
    /// A QUIC transport, application or stream error; see `QUICError`.
    case quic(QUICError)

    public var description: String {
        switch self {
        case .posix(let code): return String(cString: strerror(code.rawValue))
        case .dns(let code) where code <= -65537: return "DNS-SD error \(code): \(DNSServiceErrorText.describe(code))"
        case .dns(let code): return "DNS error \(code): \(String(cString: gai_strerror(code)))"
        case .tls(let code): return "TLS error \(code)"
        case .quic(let error): return error.description
        }
    }

    public var debugDescription: String { description }

    /// The POSIX code Network.framework reports for what the connector refused.
    package init(_ error: QUICConnectorError) {
        switch error {
        case .notConnected: self = .posix(.ENOTCONN)
        case .alreadyMigrating: self = .posix(.EALREADY)
        }
    }

    /// `error` as the API reports it: a `QUICConnectorError` becomes its `NWError`; any
    /// other error passes unchanged.
    package static func reported(_ error: any Error) -> any Error {
        guard let error = error as? QUICConnectorError else { return error }
        return NWError(error)
    }
}

/// A QUIC-level failure: the connection closed, a stream was reset, or the handshake failed.
public struct QUICError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What kind of QUIC failure an error is.
    public enum Kind: Hashable, Sendable {
        /// The peer reset the stream (RFC 9000 §19.4); `applicationErrorCode` is its code.
        case streamReset
        /// The connection closed with an application error (RFC 9000 §10.2).
        case applicationClose
        /// The connection closed with a transport error (RFC 9000 §20.1).
        case transportClose
        /// The TLS handshake failed, for example certificate verification or ALPN.
        case handshakeFailed
        /// Nothing arrived for the idle timeout, so the connection closed silently (RFC 9000
        /// §10.1).
        case idleTimeout
        /// The handshake did not complete within the handshake timeout of 60 seconds.
        case handshakeTimeout
        /// The peer sent a stateless reset: it has lost the connection's state (RFC 9000 §10.3).
        case statelessReset
        /// A stream or datagram operation that is not possible in the current state.
        case invalidOperation
    }

    /// What kind of failure this is; the codes below give the detail.
    public let kind: Kind
    /// The application error code for resets and application closes.
    public let applicationErrorCode: UInt64?
    /// The transport error code for transport closes (RFC 9000 §20.1; 0x1XX are TLS alerts).
    public let transportErrorCode: UInt64?
    /// The certificate problem, when verification failed.
    public let verificationFailure: TLSVerificationFailure?
    /// True when this side initiated the close.
    public let isLocal: Bool
    public let description: String

    init(
        kind: Kind,
        applicationErrorCode: UInt64? = nil,
        transportErrorCode: UInt64? = nil,
        verificationFailure: TLSVerificationFailure? = nil,
        isLocal: Bool = false,
        description: String
    ) {
        self.kind = kind
        self.applicationErrorCode = applicationErrorCode
        self.transportErrorCode = transportErrorCode
        self.verificationFailure = verificationFailure
        self.isLocal = isLocal
        self.description = description
    }

    init(_ reason: QUICCloseReason) {
        switch reason {
        case .localApplicationClose(let code, _):
            self.init(kind: .applicationClose, applicationErrorCode: code, isLocal: true, description: reason.description)
        case .peerApplicationClose(let code, _):
            self.init(kind: .applicationClose, applicationErrorCode: code, description: reason.description)
        case .peerTransportClose(let code, _):
            self.init(
                kind: QUICTransportErrorName.cryptoErrors.contains(code) ? .handshakeFailed : .transportClose,
                transportErrorCode: code,
                description: reason.description
            )
        case .localTransportError(let code, _):
            self.init(kind: .transportClose, transportErrorCode: code, isLocal: true, description: reason.description)
        case .handshakeFailed(let alert, _, let verification):
            self.init(
                kind: .handshakeFailed,
                transportErrorCode: 0x100 + UInt64(alert),
                verificationFailure: verification,
                isLocal: true,
                description: reason.description
            )
        case .idleTimeout: self.init(kind: .idleTimeout, description: reason.description)
        case .handshakeTimeout: self.init(kind: .handshakeTimeout, description: reason.description)
        case .statelessReset: self.init(kind: .statelessReset, description: reason.description)
        case .versionNegotiationFailed: self.init(kind: .transportClose, description: reason.description)
        }
    }

    static func streamReset(_ code: UInt64) -> QUICError {
        QUICError(kind: .streamReset, applicationErrorCode: code, description: "stream reset by peer with application error \(code)")
    }

    static func invalid(_ description: String) -> QUICError {
        QUICError(kind: .invalidOperation, isLocal: true, description: description)
    }
}

