#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

// Security's identity calls that QUIC apps make to get a `sec_identity_t`: PKCS #12 import,
// certificates from DER, and the result codes apps test. They run over GnuTLS's PKCS #12 and
// X.509 parsers; there is no keychain, so nothing is stored anywhere but in the returned objects.

/// A certificate chain with the private key of its leaf: what a TLS endpoint presents, as
/// Security's `SecIdentity`. `SecPKCS12Import` makes one; `sec_identity_create(_:)` hands it
/// to the TLS options.
public final class SecIdentity: Sendable {
    /// The certificates, leaf first.
    let certificates: [SecCertificate]
    /// The chain as PEM, as GnuTLS credentials load it.
    let certificateChainPEM: String
    /// The leaf's private key, unencrypted PKCS #8 PEM; it never leaves this process.
    let privateKeyPEM: String

    init(certificates: [SecCertificate], certificateChainPEM: String, privateKeyPEM: String) {
        self.certificates = certificates
        self.certificateChainPEM = certificateChainPEM
        self.privateKeyPEM = privateKeyPEM
    }
}

/// No error.
public let errSecSuccess: OSStatus = 0
/// A function or operation is not implemented: Security calls with no Linux counterpart.
public let errSecUnimplemented: OSStatus = -4
/// One or more parameters passed to a function were not valid.
public let errSecParam: OSStatus = -50
/// Memory could not be allocated.
public let errSecAllocate: OSStatus = -108
/// The user name or passphrase was not correct; `SecPKCS12Import` returns it for a wrong
/// passphrase or damaged contents.
public let errSecAuthFailed: OSStatus = -25293
/// The item was not found; `SecPKCS12Import` returns it for a file with no identity.
public let errSecItemNotFound: OSStatus = -25300
/// MAC verification failed during PKCS #12 import. Apple's `SecPKCS12Import` reports a wrong
/// passphrase as `errSecAuthFailed`, and so does this one.
public let errSecPkcs12VerifyFailure: OSStatus = -25264
/// Data could not be decoded: not DER PKCS #12 or not DER X.509.
public let errSecDecode: OSStatus = -26275

/// The passphrase that opens a PKCS #12 file, a string (`kSecImportExportPassphrase`).
public let kSecImportExportPassphrase: CFString = "passphrase"
/// In an item from `SecPKCS12Import`: the `SecIdentity`.
public let kSecImportItemIdentity: CFString = "identity"
/// In an item from `SecPKCS12Import`: the certificate chain, an array of `SecCertificate`,
/// leaf first.
public let kSecImportItemCertChain: CFString = "chain"
/// In an item from `SecPKCS12Import`: a `SecTrust` over the chain, for a verify step of the
/// app's own.
public let kSecImportItemTrust: CFString = "trust"
/// In an item from `SecPKCS12Import`: the PKCS #12 `friendlyName` (RFC 7292 §4.2), a string;
/// absent when the file has none.
public let kSecImportItemLabel: CFString = "label"
/// In an item from `SecPKCS12Import`: the SHA-1 identifier of the leaf's public key, `Data`.
public let kSecImportItemKeyID: CFString = "keyid"

/// Reads a PKCS #12 file (RFC 7292) as Apple's `SecPKCS12Import` does: `items` receives one
/// dictionary per identity, with `kSecImportItemIdentity`, `kSecImportItemCertChain`,
/// `kSecImportItemTrust`, `kSecImportItemKeyID` and, when the file names it,
/// `kSecImportItemLabel`.
///
/// ```swift
/// var items: CFArray?
/// let status = SecPKCS12Import(p12 as CFData, [kSecImportExportPassphrase as String: "pw"] as CFDictionary, &items)
/// guard status == errSecSuccess else { return }
/// let identity = (items as! [[String: Any]])[0][kSecImportItemIdentity as String] as! SecIdentity
/// ```
///
/// - Returns: `errSecSuccess`; `errSecDecode` when the data is not DER PKCS #12;
///   `errSecAuthFailed` when the passphrase does not open it; `errSecItemNotFound` when it
///   holds no private key with its certificate; `errSecParam` when the passphrase is not a string.
///
/// Linux note: the items live in memory only, as on iOS; there is no keychain to add them to.
/// The options are a `[String: Any]` (`CFDictionary` here), not an `NSDictionary`.
public func SecPKCS12Import(_ pkcs12_data: CFData, _ options: CFDictionary, _ items: UnsafeMutablePointer<CFArray?>) -> OSStatus {
    let passphrase: String?
    switch options[kSecImportExportPassphrase] {
    case nil: passphrase = nil
    case let text as String: passphrase = text
    default: return errSecParam
    }
    let bundle: PKCS12Bundle
    do throws(PKCS12Bundle.Failure) {
        bundle = try PKCS12Bundle.parse(der: Array(pkcs12_data), passphrase: passphrase)
    } catch {
        switch error {
        case .undecodable: return errSecDecode
        case .wrongPassphrase: return errSecAuthFailed
        case .noIdentity: return errSecItemNotFound
        }
    }
    let chain = bundle.certificatesDER.map { SecCertificate(der: Data($0)) }
    let identity = SecIdentity(certificates: chain, certificateChainPEM: bundle.certificateChainPEM, privateKeyPEM: bundle.privateKeyPEM)
    var item: [String: Any] = [
        kSecImportItemIdentity: identity,
        kSecImportItemCertChain: chain,
        kSecImportItemTrust: SecTrust(certificates: chain, serverName: ""),
        kSecImportItemKeyID: Data(bundle.keyID),
    ]
    if let label = bundle.friendlyName { item[kSecImportItemLabel] = label }
    items.pointee = [item]
    return errSecSuccess
}

/// The identity's leaf certificate, as Apple's `SecIdentityCopyCertificate`: `errSecSuccess`,
/// or `errSecItemNotFound` for an identity without one (which `SecPKCS12Import` never returns).
public func SecIdentityCopyCertificate(_ identityRef: SecIdentity, _ certificateRef: UnsafeMutablePointer<SecCertificate?>) -> OSStatus {
    certificateRef.pointee = identityRef.certificates.first
    return certificateRef.pointee == nil ? errSecItemNotFound : errSecSuccess
}

/// A certificate from its DER encoding (RFC 5280), as Apple's `SecCertificateCreateWithData`;
/// nil when `data` is not one DER X.509 certificate. Linux has one allocator: pass nil or
/// `kCFAllocatorDefault`.
public func SecCertificateCreateWithData(_ allocator: CFAllocator?, _ data: CFData) -> SecCertificate? {
    X509Certificate.isValid(der: Array(data)) ? SecCertificate(der: data) : nil
}

/// The subject's common name, or its distinguished name when it has none, as Apple's
/// `SecCertificateCopySubjectSummary`.
public func SecCertificateCopySubjectSummary(_ certificate: SecCertificate) -> CFString? {
    X509Certificate.subjectSummary(der: Array(certificate.der))
}

/// Words for a result code, as Apple's `SecCopyErrorMessageString`; nil for a code it does not
/// know. `reserved` must be nil.
public func SecCopyErrorMessageString(_ status: OSStatus, _ reserved: UnsafeMutableRawPointer?) -> CFString? {
    switch status {
    case errSecSuccess: "No error."
    case errSecUnimplemented: "Function or operation not implemented."
    case errSecParam: "One or more parameters passed to a function were not valid."
    case errSecAllocate: "Failed to allocate memory."
    case errSecAuthFailed: "The user name or passphrase you entered is not correct."
    case errSecItemNotFound: "The specified item could not be found."
    case errSecPkcs12VerifyFailure: "MAC verification failed during PKCS12 import (wrong password?)"
    case errSecDecode: "Unable to decode the provided data."
    default: nil
    }
}
