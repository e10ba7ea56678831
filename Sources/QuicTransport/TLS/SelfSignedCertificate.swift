import CQuicShims

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A freshly generated self-signed ECDSA P-256 server certificate and its private key, both PEM.
///
/// Meant for development and tests: clients must trust it explicitly, by CA file or by pinning
/// `sha256Fingerprint` (RFC 7469-style leaf pinning, over the whole DER certificate).
public struct SelfSignedCertificate: Sendable {
    /// The X.509 v3 certificate, PEM ("BEGIN CERTIFICATE").
    public let certificatePEM: String
    /// The private key, unencrypted PKCS #8 PEM ("BEGIN PRIVATE KEY").
    public let privateKeyPEM: String
    /// SHA-256 of the DER-encoded certificate.
    public let sha256Fingerprint: [UInt8]

    /// `sha256Fingerprint` as lowercase hex, accepted by `CertificateVerification.pinnedSHA256(hex:)`.
    public var sha256FingerprintHex: String { Hex.encode(sha256Fingerprint) }

    /// Generates a certificate valid from one hour ago (tolerating clock skew) for `validFor`.
    ///
    /// The certificate has subjectAltNames for every DNS name and IP address given, basicConstraints
    /// CA=false, keyUsage digitalSignature and extendedKeyUsage serverAuth (RFC 5280 §4.2.1).
    public static func generate(
        commonName: String = "localhost",
        dnsNames: [String] = ["localhost"],
        ipAddresses: [String] = ["127.0.0.1", "::1"],
        validFor: Duration = .seconds(30 * 24 * 3600)
    ) throws -> SelfSignedCertificate {
        let now = time(nil)
        return try generate(
            commonName: commonName, dnsNames: dnsNames, ipAddresses: ipAddresses,
            notBefore: now - 3600, notAfter: now + time_t(validFor.components.seconds))
    }

    /// Generates a certificate with an explicit validity window (Unix seconds), e.g. an already expired one for tests.
    package static func generate(
        commonName: String, dnsNames: [String], ipAddresses: [String], notBefore: time_t, notAfter: time_t
    ) throws -> SelfSignedCertificate {
        let addresses = try ipAddresses.map(binaryIPAddress)

        var keyHandle: gnutls_x509_privkey_t?
        defer { if keyHandle != nil { gnutls_x509_privkey_deinit(keyHandle) } }
        // GnuTLS writes the private scalar as a minimal signed integer: 31 bytes when it starts
        // with a zero byte (Python's cryptography then refuses the key), 33 when its top bit is
        // set. RFC 5915 §3 wants exactly 32, so draw again until GnuTLS's form is that. Each draw
        // gets a fresh key object: generating into one that holds a key leaks the old key's
        // numbers (GnuTLS 3.7.9; LeakSanitizer and memcheck both saw it).
        repeat {
            if keyHandle != nil { gnutls_x509_privkey_deinit(keyHandle) }
            keyHandle = nil
            try checkGnuTLS(gnutls_x509_privkey_init(&keyHandle), "gnutls_x509_privkey_init")
            try checkGnuTLS(
                gnutls_x509_privkey_generate(keyHandle!, GNUTLS_PK_ECDSA, p256Bits, 0), "gnutls_x509_privkey_generate")
        } while try privateScalarLength(keyHandle!) != 32
        let key = keyHandle!

        var certHandle: gnutls_x509_crt_t?
        try checkGnuTLS(gnutls_x509_crt_init(&certHandle), "gnutls_x509_crt_init")
        defer { gnutls_x509_crt_deinit(certHandle) }
        let cert = certHandle!

        try checkGnuTLS(gnutls_x509_crt_set_version(cert, 3), "gnutls_x509_crt_set_version")
        var serial = [UInt8](repeating: 0, count: 16)
        try checkGnuTLS(gnutls_rnd(GNUTLS_RND_NONCE, &serial, serial.count), "gnutls_rnd")
        serial[0] = serial[0] & 0x7f | 0x40  // positive, and minimal as a DER INTEGER
        try checkGnuTLS(gnutls_x509_crt_set_serial(cert, serial, serial.count), "gnutls_x509_crt_set_serial")
        try checkGnuTLS(gnutls_x509_crt_set_activation_time(cert, notBefore), "gnutls_x509_crt_set_activation_time")
        try checkGnuTLS(gnutls_x509_crt_set_expiration_time(cert, notAfter), "gnutls_x509_crt_set_expiration_time")
        let cn = Array(commonName.utf8)
        try checkGnuTLS(
            gnutls_x509_crt_set_dn_by_oid(cert, GNUTLS_OID_X520_COMMON_NAME, 0, cn, UInt32(cn.count)),
            "gnutls_x509_crt_set_dn_by_oid")
        try checkGnuTLS(gnutls_x509_crt_set_key(cert, key), "gnutls_x509_crt_set_key")
        for name in dnsNames {
            let bytes = Array(name.utf8)
            try checkGnuTLS(
                gnutls_x509_crt_set_subject_alt_name(
                    cert, GNUTLS_SAN_DNSNAME, bytes, UInt32(bytes.count), UInt32(GNUTLS_FSAN_APPEND)),
                "gnutls_x509_crt_set_subject_alt_name")
        }
        for address in addresses {
            try checkGnuTLS(
                gnutls_x509_crt_set_subject_alt_name(
                    cert, GNUTLS_SAN_IPADDRESS, address, UInt32(address.count), UInt32(GNUTLS_FSAN_APPEND)),
                "gnutls_x509_crt_set_subject_alt_name")
        }
        try checkGnuTLS(gnutls_x509_crt_set_basic_constraints(cert, 0, -1), "gnutls_x509_crt_set_basic_constraints")
        try checkGnuTLS(
            gnutls_x509_crt_set_key_usage(cert, UInt32(GNUTLS_KEY_DIGITAL_SIGNATURE)), "gnutls_x509_crt_set_key_usage")
        try checkGnuTLS(
            gnutls_x509_crt_set_key_purpose_oid(cert, GNUTLS_KP_TLS_WWW_SERVER, 0),
            "gnutls_x509_crt_set_key_purpose_oid")
        try checkGnuTLS(gnutls_x509_crt_sign2(cert, cert, key, GNUTLS_DIG_SHA256, 0), "gnutls_x509_crt_sign2")

        let der = try export("gnutls_x509_crt_export2") { gnutls_x509_crt_export2(cert, GNUTLS_X509_FMT_DER, &$0) }
        let certificatePEM = try export("gnutls_x509_crt_export2") {
            gnutls_x509_crt_export2(cert, GNUTLS_X509_FMT_PEM, &$0)
        }
        let keyPEM = try export("gnutls_x509_privkey_export2_pkcs8") {
            gnutls_x509_privkey_export2_pkcs8(key, GNUTLS_X509_FMT_PEM, nil, UInt32(GNUTLS_PKCS_PLAIN.rawValue), &$0)
        }
        return SelfSignedCertificate(
            certificatePEM: String(decoding: certificatePEM, as: UTF8.self),
            privateKeyPEM: String(decoding: keyPEM, as: UTF8.self),
            sha256Fingerprint: try SHA256.hash(der))
    }

    /// `GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1)`: the macro does not import into Swift.
    private static let p256Bits = UInt32(1) << 31 | GNUTLS_ECC_CURVE_SECP256R1.rawValue

    /// Runs a GnuTLS `*_export2` call and copies out the datum it allocated, freeing it.
    private static func export(_ function: String, _ call: (inout gnutls_datum_t) -> Int32) throws -> [UInt8] {
        var out = gnutls_datum_t()
        try checkGnuTLS(call(&out), function)
        defer { gnutlsFree(out.data) }
        return Array(UnsafeRawBufferPointer(start: out.data, count: Int(out.size)))
    }

    /// The length of an EC key's private scalar as GnuTLS stores it.
    private static func privateScalarLength(_ key: gnutls_x509_privkey_t) throws -> Int {
        var curve = gnutls_ecc_curve_t(rawValue: 0)
        var x = gnutls_datum_t(), y = gnutls_datum_t(), k = gnutls_datum_t()
        try checkGnuTLS(gnutls_x509_privkey_export_ecc_raw(key, &curve, &x, &y, &k), "gnutls_x509_privkey_export_ecc_raw")
        defer {
            gnutlsFree(x.data)
            gnutlsFree(y.data)
            gnutlsFree(k.data)
        }
        return Int(k.size)
    }

    /// The 4- or 16-byte network-order form of an IPv4 or IPv6 literal (`inet_pton`).
    private static func binaryIPAddress(_ text: String) throws -> [UInt8] {
        var v4 = [UInt8](repeating: 0, count: 4)
        if inet_pton(AF_INET, text, &v4) == 1 { return v4 }
        var v6 = [UInt8](repeating: 0, count: 16)
        if inet_pton(AF_INET6, text, &v6) == 1 { return v6 }
        throw TLSError.invalidIPAddress(text)
    }
}
