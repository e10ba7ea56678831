import CQuicShims

/// The sole owner of a GnuTLS certificate credentials object (`gnutls_certificate_credentials_t`).
///
/// Sendable invariant: the credentials are fully configured in the factory methods and never
/// mutated afterwards; GnuTLS documents credentials as safe to share read-only between any
/// number of sessions on any threads. The handle is freed exactly once, in `deinit`, so keep
/// this object alive for as long as any session that uses it.
package final class TLSCredentials: @unchecked Sendable {
    /// The underlying handle, for `gnutls_credentials_set(session, GNUTLS_CRD_CERTIFICATE, raw)`.
    package let raw: gnutls_certificate_credentials_t

    private init() throws {
        var handle: gnutls_certificate_credentials_t?
        try checkGnuTLS(gnutls_certificate_allocate_credentials(&handle), "gnutls_certificate_allocate_credentials")
        raw = handle!
    }

    deinit {
        gnutls_certificate_free_credentials(raw)
    }

    /// Server credentials from a PEM certificate chain (leaf first) and its PEM private key.
    package static func server(certificateChainPEM: String, privateKeyPEM: String) throws -> TLSCredentials {
        try server(
            certificateChain: Array(certificateChainPEM.utf8), certificateSource: "certificate PEM",
            privateKey: Array(privateKeyPEM.utf8), keySource: "private key PEM")
    }

    /// Server credentials from a PEM certificate chain file (leaf first) and a PEM private key file.
    package static func server(certificateChainFile: String, privateKeyFile: String) throws -> TLSCredentials {
        try server(
            certificateChain: readTLSFile(certificateChainFile), certificateSource: certificateChainFile,
            privateKey: readTLSFile(privateKeyFile), keySource: privateKeyFile)
    }

    /// Client credentials holding the trust anchors that `verification` needs (none for pinning
    /// or insecure) and, when given, the certificate chain and key to present when the server
    /// asks for one (RFC 8446 §4.4.2).
    package static func client(
        verification: CertificateVerification, certificateChainPEM: String? = nil, privateKeyPEM: String? = nil
    ) throws -> TLSCredentials {
        let credentials = try TLSCredentials()
        if let certificateChainPEM, let privateKeyPEM {
            try credentials.addKeyPair(
                certificateChain: Array(certificateChainPEM.utf8), certificateSource: "client certificate PEM",
                privateKey: Array(privateKeyPEM.utf8), keySource: "client private key PEM")
        }
        switch verification {
        case .systemTrustStore:
            let count = gnutls_certificate_set_x509_system_trust(credentials.raw)
            try checkGnuTLS(count, "gnutls_certificate_set_x509_system_trust")
            if count == 0 {
                throw TLSError.noCertificates(source: "the system trust store (is ca-certificates installed?)")
            }
        case .caFile(let path):
            let pem = try readTLSFile(path)
            let count = withDatum(pem) {
                gnutls_certificate_set_x509_trust_mem(credentials.raw, &$0, GNUTLS_X509_FMT_PEM)
            }
            if count < 0 { throw TLSError.invalidPEM(source: path, detail: gnutlsMessage(count)) }
            if count == 0 { throw TLSError.noCertificates(source: path) }
        case .pinnedSHA256, .insecure, .custom:
            break
        }
        return credentials
    }

    private static func server(
        certificateChain: [UInt8], certificateSource: String, privateKey: [UInt8], keySource: String
    ) throws -> TLSCredentials {
        let credentials = try TLSCredentials()
        try credentials.addKeyPair(
            certificateChain: certificateChain, certificateSource: certificateSource, privateKey: privateKey, keySource: keySource)
        return credentials
    }

    /// Adds a PEM certificate chain and its key; throws naming the input that does not parse.
    private func addKeyPair(certificateChain: [UInt8], certificateSource: String, privateKey: [UInt8], keySource: String) throws {
        let rc = withDatum(certificateChain) { cert in
            withDatum(privateKey) { key in
                gnutls_certificate_set_x509_key_mem2(raw, &cert, &key, GNUTLS_X509_FMT_PEM, nil, 0)
            }
        }
        guard rc < 0 else { return }
        // GnuTLS does not say which input was bad; find out so the error can name it.
        if let detail = Self.pemProblem(certificateChain, parse: Self.parseCertificateChain) {
            throw TLSError.invalidPEM(source: certificateSource, detail: detail)
        }
        if let detail = Self.pemProblem(privateKey, parse: Self.parsePrivateKey) {
            throw TLSError.invalidPEM(source: keySource, detail: detail)
        }
        throw TLSError.gnutlsFailure(function: "gnutls_certificate_set_x509_key_mem2", code: rc)
    }

    private static func pemProblem(_ bytes: [UInt8], parse: (inout gnutls_datum_t) -> Int32) -> String? {
        if bytes.isEmpty { return "the input is empty" }
        let rc = withDatum(bytes, parse)
        return rc < 0 ? gnutlsMessage(rc) : nil
    }

    private static func parseCertificateChain(_ datum: inout gnutls_datum_t) -> Int32 {
        var certs: UnsafeMutablePointer<gnutls_x509_crt_t?>?
        var count: UInt32 = 0
        let rc = gnutls_x509_crt_list_import2(&certs, &count, &datum, GNUTLS_X509_FMT_PEM, 0)
        guard rc >= 0, let certs else { return rc }
        for index in 0..<Int(count) { gnutls_x509_crt_deinit(certs[index]) }
        gnutlsFree(certs)
        return 0
    }

    private static func parsePrivateKey(_ datum: inout gnutls_datum_t) -> Int32 {
        var key: gnutls_x509_privkey_t?
        let rc = gnutls_x509_privkey_init(&key)
        guard rc >= 0 else { return rc }
        defer { gnutls_x509_privkey_deinit(key) }
        return gnutls_x509_privkey_import2(key, &datum, GNUTLS_X509_FMT_PEM, nil, 0)
    }
}
