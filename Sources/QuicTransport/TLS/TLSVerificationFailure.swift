import CQuicShims

/// Why the peer's certificate was rejected.
public enum TLSVerificationFailure: Sendable, Hashable, CustomStringConvertible {
    /// The chain does not lead to a trusted CA (`GNUTLS_CERT_SIGNER_NOT_FOUND`).
    case unknownIssuer
    /// The certificate is not valid for the name or IP address we connected to (RFC 6125).
    case nameMismatch(expected: String)
    /// A certificate in the chain has expired.
    case expired
    /// A certificate in the chain is not valid yet.
    case notYetValid
    /// A certificate in the chain has been revoked.
    case revoked
    /// The leaf certificate's SHA-256 fingerprint differs from the pinned one (both lowercase hex).
    case pinMismatch(expected: String, actual: String)
    /// The peer presented no certificate.
    case noPeerCertificate
    /// The application's verifier (a verify block) answered `false`.
    case rejectedByVerifier
    /// Any other failure, described by GnuTLS.
    case other(String)

    public var description: String {
        switch self {
        case .unknownIssuer:
            "unknown issuer: the server's certificate is not signed by a trusted CA"
        case .nameMismatch(let expected):
            "name mismatch (the server's certificate is not valid for \"\(expected)\")"
        case .expired:
            "certificate expired (check the server's certificate or the system clock)"
        case .notYetValid:
            "certificate not yet valid (check the server's certificate or the system clock)"
        case .revoked:
            "certificate revoked"
        case .pinMismatch(let expected, let actual):
            "pinned SHA-256 fingerprint mismatch (expected \(expected), server presented \(actual))"
        case .noPeerCertificate:
            "the server presented no certificate"
        case .rejectedByVerifier:
            "rejected by the application's certificate verifier"
        case .other(let text):
            text
        }
    }
}

extension TLSVerificationFailure {
    /// Maps a nonzero `gnutls_certificate_status_t` bit set to a failure; nil means the status is clean.
    ///
    /// When several bits are set the most actionable one wins: unknown issuer, expired,
    /// not yet valid, name mismatch, revoked, then GnuTLS's own text for anything else.
    init?(status: UInt32, serverName: String) {
        func has(_ flag: gnutls_certificate_status_t) -> Bool { status & flag.rawValue != 0 }
        if status == 0 { return nil }
        if has(GNUTLS_CERT_SIGNER_NOT_FOUND) {
            self = .unknownIssuer
        } else if has(GNUTLS_CERT_EXPIRED) {
            self = .expired
        } else if has(GNUTLS_CERT_NOT_ACTIVATED) {
            self = .notYetValid
        } else if has(GNUTLS_CERT_UNEXPECTED_OWNER) {
            self = .nameMismatch(expected: serverName)
        } else if has(GNUTLS_CERT_REVOKED) {
            self = .revoked
        } else {
            self = .other(Self.statusText(status))
        }
    }

    /// GnuTLS's human-readable rendering of a status bit set (`gnutls_certificate_verification_status_print`).
    private static func statusText(_ status: UInt32) -> String {
        var out = gnutls_datum_t()
        guard gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &out, 0) >= 0,
              let data = out.data
        else { return "certificate verification failed (GnuTLS status 0x\(String(status, radix: 16)))" }
        defer { gnutlsFree(data) }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: Int(out.size)), as: UTF8.self)
    }
}
