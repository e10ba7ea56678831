import CQuicShims

/// How a client decides whether to trust the server's certificate.
public enum CertificateVerification: Sendable, Equatable {
    /// Verify the chain against the operating system's CA store and check the server name.
    case systemTrustStore
    /// Verify the chain against the CA certificates in a PEM file and check the server name.
    case caFile(String)
    /// Accept exactly the leaf certificate whose DER encoding has this SHA-256 digest; chain and name are not checked.
    case pinnedSHA256([UInt8])
    /// Accept any certificate. For testing only: the connection is not authenticated.
    case insecure

    /// Parses a SHA-256 pin written as hex, optionally with colons as `openssl x509 -fingerprint -sha256` prints it.
    public static func pinnedSHA256(hex: String) throws -> CertificateVerification {
        let trimmed = hex.trimmingASCIIWhitespace()
        var digits = Substring(trimmed)
        if let equals = digits.lastIndex(of: "="), digits.lowercased().hasPrefix("sha256") {
            digits = digits[digits.index(after: equals)...]  // "SHA256 Fingerprint=AB:CD:..."
        }
        let compact = digits.filter { $0 != ":" }
        guard compact.count == SHA256.byteCount * 2 else {
            throw TLSError.invalidPin(input: hex, reason: "got \(compact.count) hex digits")
        }
        guard let bytes = Hex.decode(compact) else {
            throw TLSError.invalidPin(input: hex, reason: "contains a character that is not a hex digit")
        }
        return .pinnedSHA256(bytes)
    }
}

/// Checks the peer certificate of a handshaking client `session` against `verification`.
///
/// Call it from a `gnutls_session_set_verify_function` or `gnutls_certificate_set_verify_function`
/// callback (GnuTLS manual, "Verifying a certificate in the context of TLS session"); a non-nil
/// result should abort the handshake.
/// For the trust-store cases the trust anchors must already be in the session's credentials
/// (see `TLSCredentials.client(verification:)`); `serverName` may be a DNS name or an IP literal,
/// both of which `gnutls_certificate_verify_peers` matches against the subjectAltName (RFC 6125).
package func verifyPeerCertificate(
    session: gnutls_session_t, serverName: String, verification: CertificateVerification
) -> TLSVerificationFailure? {
    switch verification {
    case .insecure:
        return nil
    case .pinnedSHA256(let expected):
        var count: UInt32 = 0
        guard let chain = gnutls_certificate_get_peers(session, &count), count > 0 else { return .noPeerCertificate }
        let leaf = chain[0]
        let actual: [UInt8]
        do {
            actual = try SHA256.hash(UnsafeRawBufferPointer(start: leaf.data, count: Int(leaf.size)))
        } catch {
            return .other("\(error)")
        }
        return actual == expected ? nil : .pinMismatch(expected: Hex.encode(expected), actual: Hex.encode(actual))
    case .systemTrustStore, .caFile:
        var status: UInt32 = 0
        let rc = verifyPeers(session: session, serverName: serverName, status: &status)
        if rc == GNUTLS_E_NO_CERTIFICATE_FOUND { return .noPeerCertificate }
        if rc < 0 { return .other("gnutls_certificate_verify_peers failed: \(gnutlsMessage(rc))") }
        return TLSVerificationFailure(status: status, serverName: serverName)
    }
}

/// `gnutls_certificate_verify_peers3(session, serverName, &status)` plus an extendedKeyUsage serverAuth check.
///
/// The key purpose check follows RFC 5280 §4.2.1.12, as `gnutls-cli` does.
private func verifyPeers(session: gnutls_session_t, serverName: String, status: inout UInt32) -> Int32 {
    serverName.withCString { name in
        GNUTLS_KP_TLS_WWW_SERVER.withCString { purpose in
            var data = [
                gnutls_typed_vdata_st(
                    type: GNUTLS_DT_DNS_HOSTNAME,
                    data: UnsafeMutableRawPointer(mutating: name).assumingMemoryBound(to: UInt8.self), size: 0),
                gnutls_typed_vdata_st(
                    type: GNUTLS_DT_KEY_PURPOSE_OID,
                    data: UnsafeMutableRawPointer(mutating: purpose).assumingMemoryBound(to: UInt8.self), size: 0),
            ]
            return gnutls_certificate_verify_peers(session, &data, UInt32(data.count), &status)
        }
    }
}

extension String {
    fileprivate func trimmingASCIIWhitespace() -> Substring {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return self[first...last]
    }
}
