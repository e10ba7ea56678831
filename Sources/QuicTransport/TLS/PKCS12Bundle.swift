import CQuicShims

#if canImport(Glibc)
import Glibc
#endif

/// What a PKCS #12 file (RFC 7292) holds for TLS: a private key and its certificate chain,
/// read with GnuTLS's `gnutls_pkcs12_*` calls. `SecPKCS12Import` builds its items from it.
package struct PKCS12Bundle: Sendable {
    /// Why a PKCS #12 file could not be read.
    package enum Failure: Error, Sendable, Equatable {
        /// Not DER PKCS #12, or damaged.
        case undecodable(String)
        /// The passphrase does not open it: the MAC does not verify or the bags do not decrypt.
        case wrongPassphrase
        /// It decoded, but holds no private key with a certificate for it.
        case noIdentity(String)
    }

    /// The certificate chain, leaf first, DER.
    package let certificatesDER: [[UInt8]]
    /// The same chain as PEM, as GnuTLS credentials load it.
    package let certificateChainPEM: String
    /// The private key, unencrypted PKCS #8 PEM.
    package let privateKeyPEM: String
    /// The `friendlyName` of the first bag that has one (RFC 7292 §4.2), or nil.
    package let friendlyName: String?
    /// The SHA-1 key identifier of the leaf's public key.
    package let keyID: [UInt8]

    /// Reads a DER PKCS #12 file and opens it with `passphrase` (nil for none).
    package static func parse(der: [UInt8], passphrase: String?) throws(Failure) -> PKCS12Bundle {
        var handle: gnutls_pkcs12_t?
        guard gnutls_pkcs12_init(&handle) >= 0, let p12 = handle else { throw .undecodable("gnutls_pkcs12_init failed") }
        defer { gnutls_pkcs12_deinit(p12) }
        let imported = withDatum(der) { gnutls_pkcs12_import(p12, &$0, GNUTLS_X509_FMT_DER, 0) }
        guard imported >= 0 else { throw .undecodable(gnutlsMessage(imported)) }

        // A file written without a MAC (openssl -nomac) has none to verify.
        let mac = gnutls_pkcs12_verify_mac(p12, passphrase)
        if mac == GNUTLS_E_MAC_VERIFY_FAILED { throw .wrongPassphrase }

        var key: gnutls_x509_privkey_t?
        var chain: UnsafeMutablePointer<gnutls_x509_crt_t?>?
        var chainCount: UInt32 = 0
        let parsed = gnutls_pkcs12_simple_parse(
            p12, passphrase, &key, &chain, &chainCount, nil, nil, nil, UInt32(GNUTLS_PKCS12_SP_INCLUDE_SELF_SIGNED))
        defer {
            if let key { gnutls_x509_privkey_deinit(key) }
            if let chain {
                for index in 0..<Int(chainCount) { gnutls_x509_crt_deinit(chain[index]) }
                gnutlsFree(chain)
            }
        }
        if parsed == GNUTLS_E_DECRYPTION_FAILED || parsed == GNUTLS_E_MAC_VERIFY_FAILED { throw .wrongPassphrase }
        guard parsed >= 0 else {
            // A bag that does not decrypt with the wrong passphrase reads as garbage to GnuTLS.
            if mac < 0 && mac != GNUTLS_E_INVALID_REQUEST { throw .wrongPassphrase }
            throw .noIdentity(gnutlsMessage(parsed))
        }
        guard let key, let chain, chainCount > 0 else { throw .noIdentity("no private key with a matching certificate") }

        var der: [[UInt8]] = []
        var pem = ""
        for index in 0..<Int(chainCount) {
            guard let certificate = chain[index] else { continue }
            der.append(try export { gnutls_x509_crt_export2(certificate, GNUTLS_X509_FMT_DER, &$0) })
            pem += String(decoding: try export { gnutls_x509_crt_export2(certificate, GNUTLS_X509_FMT_PEM, &$0) }, as: UTF8.self)
        }
        let keyPEM = try export {
            gnutls_x509_privkey_export2_pkcs8(key, GNUTLS_X509_FMT_PEM, nil, UInt32(GNUTLS_PKCS_PLAIN.rawValue), &$0)
        }
        var keyID = [UInt8](repeating: 0, count: 64)
        var keyIDSize = keyID.count
        if gnutls_x509_crt_get_key_id(chain[0], 0, &keyID, &keyIDSize) < 0 { keyIDSize = 0 }
        return PKCS12Bundle(
            certificatesDER: der, certificateChainPEM: pem, privateKeyPEM: String(decoding: keyPEM, as: UTF8.self),
            friendlyName: friendlyName(p12, passphrase: passphrase), keyID: Array(keyID.prefix(keyIDSize)))
    }

    /// The first `friendlyName` attribute in the file's bags, decrypting encrypted ones.
    private static func friendlyName(_ p12: gnutls_pkcs12_t, passphrase: String?) -> String? {
        var index: Int32 = 0
        while true {
            var handle: gnutls_pkcs12_bag_t?
            guard gnutls_pkcs12_bag_init(&handle) >= 0, let bag = handle else { return nil }
            defer { gnutls_pkcs12_bag_deinit(bag) }
            guard gnutls_pkcs12_get_bag(p12, index, bag) >= 0 else { return nil }
            index += 1
            if gnutls_pkcs12_bag_get_type(bag, 0) == Int32(GNUTLS_BAG_ENCRYPTED.rawValue), gnutls_pkcs12_bag_decrypt(bag, passphrase) < 0 {
                continue
            }
            for element in 0..<max(0, gnutls_pkcs12_bag_get_count(bag)) {
                var name: UnsafeMutablePointer<CChar>?
                if gnutls_pkcs12_bag_get_friendly_name(bag, UInt32(element), &name) >= 0, let name {
                    return String(cString: name)
                }
            }
        }
    }

    /// Runs a GnuTLS `*_export2` call and copies out the datum it allocated, freeing it.
    private static func export(_ call: (inout gnutls_datum_t) -> Int32) throws(Failure) -> [UInt8] {
        var out = gnutls_datum_t()
        let rc = call(&out)
        guard rc >= 0 else { throw .noIdentity(gnutlsMessage(rc)) }
        defer { gnutlsFree(out.data) }
        return Array(UnsafeRawBufferPointer(start: out.data, count: Int(out.size)))
    }
}

/// One DER certificate read with GnuTLS, for `SecCertificateCreateWithData` and summaries.
package enum X509Certificate {
    /// Whether `der` is one whole X.509 certificate (RFC 5280 §4.1).
    package static func isValid(der: [UInt8]) -> Bool {
        withCertificate(der) { _ in true } ?? false
    }

    /// The subject's common name, or its whole DN when it has none (RFC 4514 form).
    package static func subjectSummary(der: [UInt8]) -> String? {
        withCertificate(der) { certificate in
            var buffer = [CChar](repeating: 0, count: 1024)
            var size = buffer.count
            if gnutls_x509_crt_get_dn_by_oid(certificate, GNUTLS_OID_X520_COMMON_NAME, 0, 0, &buffer, &size) >= 0 {
                return text(buffer)
            }
            size = buffer.count
            guard gnutls_x509_crt_get_dn(certificate, &buffer, &size) >= 0 else { return nil }
            return text(buffer)
        } ?? nil
    }

    /// Every certificate in a PEM chain, DER, in order; nil when it holds none or does not parse.
    package static func derChain(pem: [UInt8]) -> [[UInt8]]? {
        var list: UnsafeMutablePointer<gnutls_x509_crt_t?>?
        var count: UInt32 = 0
        let rc = withDatum(pem) { gnutls_x509_crt_list_import2(&list, &count, &$0, GNUTLS_X509_FMT_PEM, 0) }
        guard rc >= 0, let list else { return nil }
        defer {
            for index in 0..<Int(count) { gnutls_x509_crt_deinit(list[index]) }
            gnutlsFree(list)
        }
        var chain: [[UInt8]] = []
        for index in 0..<Int(count) {
            var out = gnutls_datum_t()
            guard gnutls_x509_crt_export2(list[index], GNUTLS_X509_FMT_DER, &out) >= 0 else { return nil }
            chain.append(Array(UnsafeRawBufferPointer(start: out.data, count: Int(out.size))))
            gnutlsFree(out.data)
        }
        return chain.isEmpty ? nil : chain
    }

    /// The UTF-8 text before the first NUL of a C string buffer.
    private static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func withCertificate<R>(_ der: [UInt8], _ body: (gnutls_x509_crt_t) -> R) -> R? {
        var handle: gnutls_x509_crt_t?
        guard !der.isEmpty, gnutls_x509_crt_init(&handle) >= 0, let certificate = handle else { return nil }
        defer { gnutls_x509_crt_deinit(certificate) }
        guard withDatum(der, { gnutls_x509_crt_import(certificate, &$0, GNUTLS_X509_FMT_DER) }) >= 0 else { return nil }
        return body(certificate)
    }
}
