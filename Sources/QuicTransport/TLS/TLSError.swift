import CQuicShims

/// An error from loading TLS material or from verifying a peer's certificate.
public struct TLSError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Code: Sendable, Equatable {
        case missingFile(path: String)
        case unreadableFile(path: String, reason: String)
        case invalidPEM(source: String, detail: String)
        case noCertificates(source: String)
        case invalidPin(input: String, reason: String)
        case invalidIPAddress(String)
        case gnutlsFailure(function: String, code: Int32, message: String)
        case verificationFailed(TLSVerificationFailure)
    }

    private let code: Code

    private init(_ code: Code) { self.code = code }

    /// A file that should contain a certificate or key does not exist.
    public static func missingFile(path: String) -> TLSError { TLSError(.missingFile(path: path)) }

    /// A file exists but cannot be read (permissions, a directory, an I/O error).
    public static func unreadableFile(path: String, reason: String) -> TLSError {
        TLSError(.unreadableFile(path: path, reason: reason))
    }

    /// A certificate or key could not be parsed; `source` is a path or a label such as "certificate PEM".
    public static func invalidPEM(source: String, detail: String) -> TLSError {
        TLSError(.invalidPEM(source: source, detail: detail))
    }

    /// A CA file or trust store yielded no certificates.
    public static func noCertificates(source: String) -> TLSError { TLSError(.noCertificates(source: source)) }

    /// A SHA-256 pin given by the user is malformed.
    public static func invalidPin(input: String, reason: String) -> TLSError {
        TLSError(.invalidPin(input: input, reason: reason))
    }

    /// A string given as an IP address is neither IPv4 nor IPv6.
    public static func invalidIPAddress(_ text: String) -> TLSError { TLSError(.invalidIPAddress(text)) }

    /// A GnuTLS call failed; the message comes from `gnutls_strerror`.
    public static func gnutlsFailure(function: String, code: Int32) -> TLSError {
        TLSError(.gnutlsFailure(function: function, code: code, message: gnutlsMessage(code)))
    }

    /// The peer's certificate was rejected.
    public static func verificationFailed(_ failure: TLSVerificationFailure) -> TLSError {
        TLSError(.verificationFailed(failure))
    }

    /// The file path the error is about, if any.
    public var path: String? {
        switch code {
        case .missingFile(let path), .unreadableFile(let path, _): path
        case .invalidPEM(let source, _), .noCertificates(let source): source
        default: nil
        }
    }

    /// The GnuTLS error code, if this error is a GnuTLS call's failure.
    var gnutlsCode: Int32? {
        if case .gnutlsFailure(_, let code, _) = code { code } else { nil }
    }

    /// The certificate verification failure, if this error is one.
    public var verificationFailure: TLSVerificationFailure? {
        if case .verificationFailed(let failure) = code { failure } else { nil }
    }

    public var description: String {
        switch code {
        case .missingFile(let path):
            "no such file: \(path)"
        case .unreadableFile(let path, let reason):
            "cannot read \(path): \(reason)"
        case .invalidPEM(let source, let detail):
            "cannot load certificate or key from \(source): \(detail)"
        case .noCertificates(let source):
            "no certificates found in \(source)"
        case .invalidPin(let input, let reason):
            "invalid SHA-256 pin \"\(input)\": \(reason) (expected 64 hex digits, colons allowed)"
        case .invalidIPAddress(let text):
            "not an IPv4 or IPv6 address: \"\(text)\""
        case .gnutlsFailure(let function, let code, let message):
            "\(function) failed: \(message) (GnuTLS error \(code))"
        case .verificationFailed(let failure):
            "certificate verification failed: \(failure)"
        }
    }
}

/// The text of a GnuTLS error code (`gnutls_strerror`).
func gnutlsMessage(_ code: Int32) -> String {
    gnutls_strerror(code).map { String(cString: $0) } ?? "unknown GnuTLS error"
}
