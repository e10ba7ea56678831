import QuicTransport

extension ServerTrustOptions {
    /// What to tell the user when the server's certificate did not lead to a trusted CA: the
    /// flags that change whom the tool trusts. The library's messages name no flags; the tools
    /// add this one when they print such a failure.
    public static let untrustedCertificateHint = "pass --cacert, --pin-sha256 or -k"

    /// `error`'s message, with `untrustedCertificateHint` after it when `untrusted` is true or
    /// when `error` is QUIC's or TLS's refusal of a certificate from an unknown issuer.
    public static func describe(_ error: any Error, untrusted: Bool = false) -> String {
        untrusted || isUnknownIssuer(error) ? "\(error) (\(untrustedCertificateHint))" : "\(error)"
    }

    /// Whether `error` says the peer's certificate chain does not lead to a trusted CA.
    public static func isUnknownIssuer(_ error: any Error) -> Bool {
        switch error {
        case let error as NWError:
            if case .quic(let quic) = error { quic.verificationFailure == .unknownIssuer } else { false }
        case let error as QUICError: error.verificationFailure == .unknownIssuer
        case let error as TLSError: error.verificationFailure == .unknownIssuer
        default: false
        }
    }
}
