import CQuicShims

/// Why a connection ended, as seen by this endpoint.
package enum QUICCloseReason: Sendable, Equatable, CustomStringConvertible {
    /// This side closed with an application error code (RFC 9000 §19.19, type 0x1d).
    case localApplicationClose(code: UInt64, reason: String)
    /// The peer closed with an application error code.
    case peerApplicationClose(code: UInt64, reason: String)
    /// The peer closed with a transport error code (RFC 9000 §20.1).
    case peerTransportClose(code: UInt64, reason: String)
    /// This side closed with a transport error, for example after a protocol violation.
    case localTransportError(code: UInt64, reason: String)
    /// The TLS handshake failed; `alert` is the TLS alert, `verification` the certificate problem if any.
    case handshakeFailed(alert: UInt8, detail: String, verification: TLSVerificationFailure?)
    /// No packet arrived within the idle timeout (RFC 9000 §10.1).
    case idleTimeout
    /// The handshake did not finish within the handshake timeout.
    case handshakeTimeout
    /// The peer sent a stateless reset (RFC 9000 §10.3).
    case statelessReset
    /// The server offered no version this endpoint supports (RFC 9000 §6).
    case versionNegotiationFailed

    package var description: String {
        switch self {
        case .localApplicationClose(let code, let reason):
            return "closed locally with application error \(code)" + (reason.isEmpty ? "" : " (\(reason))")
        case .peerApplicationClose(let code, let reason):
            return "peer closed with application error \(code)" + (reason.isEmpty ? "" : " (\(reason))")
        case .peerTransportClose(let code, let reason):
            return "peer closed with transport error \(QUICTransportErrorName.describe(code))"
                + (reason.isEmpty ? "" : " (\(reason))")
        case .localTransportError(let code, let reason):
            return "connection error \(QUICTransportErrorName.describe(code))" + (reason.isEmpty ? "" : ": \(reason)")
        case .handshakeFailed(let alert, let detail, let verification):
            if let verification { return "TLS handshake failed: certificate verification failed: \(verification)" }
            return "TLS handshake failed: \(detail) (TLS alert \(QUICTransportErrorName.tlsAlertName(alert)))"
        case .idleTimeout: return "idle timeout"
        case .handshakeTimeout: return "handshake timed out"
        case .statelessReset: return "peer sent a stateless reset"
        case .versionNegotiationFailed: return "no common QUIC version"
        }
    }

    /// Whether a TLS alert carried as CRYPTO_ERROR (RFC 9001 §4.8) ended the connection, sent by
    /// either side; a failed local handshake counts too.
    package var isCryptoError: Bool {
        switch self {
        case .handshakeFailed: return true
        case .peerTransportClose(let code, _), .localTransportError(let code, _): return QUICTransportErrorName.cryptoErrors.contains(code)
        default: return false
        }
    }

    /// A clean, expected end: a close with code 0 by either side (NO_ERROR or H3_NO_ERROR's 0).
    /// An idle timeout is not one.
    package var isNoError: Bool {
        switch self {
        case .localApplicationClose(let code, _), .peerApplicationClose(let code, _): return code == 0
        case .peerTransportClose(let code, _): return code == 0
        default: return false
        }
    }
}

/// Names for the transport error codes of RFC 9000 §20.1 and RFC 9001 §4.8.
enum QUICTransportErrorName {
    /// CRYPTO_ERROR codes: 0x100 plus a TLS alert (RFC 9001 §4.8).
    static let cryptoErrors: ClosedRange<UInt64> = 0x100...0x1ff

    /// The RFC 8446 §6 name of a TLS alert, as QUIC carries it in CRYPTO_ERROR (RFC 9001 §4.8).
    static func tlsAlertName(_ alert: UInt8) -> String {
        let names: [UInt8: String] = [
            10: "unexpected_message", 20: "bad_record_mac", 40: "handshake_failure", 42: "bad_certificate",
            43: "unsupported_certificate", 44: "certificate_revoked", 45: "certificate_expired",
            46: "certificate_unknown", 47: "illegal_parameter", 48: "unknown_ca", 50: "decode_error",
            51: "decrypt_error", 70: "protocol_version", 80: "internal_error", 109: "missing_extension",
            110: "unsupported_extension", 112: "unrecognized_name", 116: "certificate_required",
            120: "no_application_protocol",
        ]
        return names[alert] ?? "alert \(alert)"
    }

    static func describe(_ code: UInt64) -> String {
        let names: [UInt64: String] = [
            0x0: "NO_ERROR", 0x1: "INTERNAL_ERROR", 0x2: "CONNECTION_REFUSED", 0x3: "FLOW_CONTROL_ERROR",
            0x4: "STREAM_LIMIT_ERROR", 0x5: "STREAM_STATE_ERROR", 0x6: "FINAL_SIZE_ERROR",
            0x7: "FRAME_ENCODING_ERROR", 0x8: "TRANSPORT_PARAMETER_ERROR", 0x9: "CONNECTION_ID_LIMIT_ERROR",
            0xa: "PROTOCOL_VIOLATION", 0xb: "INVALID_TOKEN", 0xc: "APPLICATION_ERROR",
            0xd: "CRYPTO_BUFFER_EXCEEDED", 0xe: "KEY_UPDATE_ERROR", 0xf: "AEAD_LIMIT_REACHED",
            0x10: "NO_VIABLE_PATH",
        ]
        if let name = names[code] { return "\(name) (0x\(String(code, radix: 16)))" }
        if cryptoErrors.contains(code) {
            return "CRYPTO_ERROR \(tlsAlertName(UInt8(code - 0x100))) (0x\(String(code, radix: 16)))"
        }
        return "0x\(String(code, radix: 16))"
    }
}
