#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Dispatch

// Security.framework's TLS calls that QUIC apps make, with Apple's names and shapes, over our TLS
// options. Linux has no Security framework: these types carry what GnuTLS gives us (the peer's
// DER certificates, the server name, the negotiated protocol). Identities come from
// `SecPKCS12Import` (SecIdentity.swift); the one addition is
// `sec_identity_create(certificateChainPEMFile:privateKeyPEMFile:)`, for PEM files.

/// The TLS options inside QUIC options (`NWProtocolQUIC.Options.securityProtocolOptions`).
/// Changes made through it change those options.
public final class sec_protocol_options_t: @unchecked Sendable {
    // @unchecked Sendable: a view of the options, which are filled in on one thread before start.
    let options: NWProtocolQUIC.Options

    init(options: NWProtocolQUIC.Options) { self.options = options }
}

/// What the TLS handshake negotiated, as the verify block and `securityProtocolMetadata` see it.
public final class sec_protocol_metadata_t: @unchecked Sendable {
    // @unchecked Sendable: immutable after init; the C strings are freed in deinit.
    let negotiatedProtocol: UnsafeMutablePointer<CChar>?
    let serverName: UnsafeMutablePointer<CChar>?
    /// TLS 1.3 for QUIC; TLS over TCP may settle on 1.2.
    let negotiatedVersion: tls_protocol_version_t

    init(negotiated alpn: String?, serverName: String? = nil, version: tls_protocol_version_t = .TLSv13) {
        negotiatedProtocol = alpn.flatMap { strdup($0) }
        self.serverName = serverName.flatMap { strdup($0) }
        negotiatedVersion = version
    }

    deinit {
        free(negotiatedProtocol)
        free(serverName)
    }
}

/// The peer's certificate chain handed to a verify block; `sec_trust_copy_ref` opens it.
public final class sec_trust_t: Sendable {
    let trust: SecTrust

    init(trust: SecTrust) { self.trust = trust }
}

/// The certificates the peer presented, leaf first, and the name they should be valid for.
public final class SecTrust: Sendable {
    let certificates: [SecCertificate]
    /// The server name the client connected to (SNI), or the address when it connected by address.
    public let serverName: String

    init(certificates: [SecCertificate], serverName: String) {
        self.certificates = certificates
        self.serverName = serverName
    }
}

/// One X.509 certificate (RFC 5280), DER-encoded.
public final class SecCertificate: Sendable, Equatable {
    let der: Data

    init(der: Data) { self.der = der }

    public static func == (lhs: SecCertificate, rhs: SecCertificate) -> Bool { lhs.der == rhs.der }
}

/// A certificate chain and private key for the local side of TLS, as Security's
/// `sec_identity_t`: `sec_identity_create(_:)` wraps a `SecIdentity`.
public final class sec_identity_t: Sendable {
    let identity: SecIdentity

    init(identity: SecIdentity) { self.identity = identity }
}

/// TLS protocol versions, with Apple's case names. QUIC uses TLS 1.3 only (RFC 9001 §4.2).
public enum tls_protocol_version_t: UInt16, Sendable {
    /// TLS 1.0 (0x0301); QUIC cannot use it.
    case TLSv10 = 0x0301
    /// TLS 1.1 (0x0302); QUIC cannot use it.
    case TLSv11 = 0x0302
    /// TLS 1.2 (0x0303); QUIC cannot use it.
    case TLSv12 = 0x0303
    /// TLS 1.3 (0x0304), the only version QUIC uses (RFC 9001 §4.2).
    case TLSv13 = 0x0304
    /// DTLS 1.0 (0xfeff); as a minimum or maximum it fails the start.
    case DTLSv10 = 0xfeff
    /// DTLS 1.2 (0xfefd); as a minimum or maximum it fails the start.
    case DTLSv12 = 0xfefd

    var isDatagramTLS: Bool { self == .DTLSv10 || self == .DTLSv12 }
}

/// Calls the handshake with `true` to trust the peer or `false` to reject it.
public typealias sec_protocol_verify_complete_t = (Bool) -> Void

/// A verify block: decides on the peer's chain and calls the completion once.
public typealias sec_protocol_verify_t = (sec_protocol_metadata_t, sec_trust_t, @escaping sec_protocol_verify_complete_t) -> Void

/// Replaces certificate verification with `verify_block`, run on `verify_block_queue`, exactly
/// as on Apple platforms: the system trust store is not consulted, and the handshake goes on
/// only if the block calls its completion with `true`.
///
/// Linux note: the handshake waits for the answer on its event loop, for at most
/// `CertificateVerifier.answerTimeout`; a block that never answers rejects the peer.
public func sec_protocol_options_set_verify_block(
    _ options: sec_protocol_options_t,
    _ verify_block: @escaping sec_protocol_verify_t,
    _ verify_block_queue: DispatchQueue
) {
    let block = VerifyBlock(block: verify_block)
    options.options.tls.certificateVerification = .custom(
        CertificateVerifier { peer, complete in
            verify_block_queue.async { block.block(sec_protocol_metadata_t(peer: peer), sec_trust_t(peer: peer), complete) }
        }
    )
}

extension sec_protocol_metadata_t {
    /// What a verifier sees of the handshake: the negotiated protocol and the server name.
    convenience init(peer: CertificateVerifier.Peer) {
        self.init(negotiated: peer.negotiatedALPN, serverName: peer.serverName)
    }
}

extension sec_trust_t {
    /// The chain a verifier is asked about, for `sec_trust_copy_ref`.
    convenience init(peer: CertificateVerifier.Peer) {
        self.init(trust: SecTrust(certificates: peer.certificateChain.map { SecCertificate(der: Data($0)) }, serverName: peer.serverName))
    }
}

/// A verify block, which Apple's API does not mark `@Sendable`.
// @unchecked Sendable: the block only ever runs on the queue the app named, as on Apple platforms.
private struct VerifyBlock: @unchecked Sendable {
    let block: sec_protocol_verify_t
}

/// Adds an ALPN protocol ID (RFC 7301) to the options' list, after those already there.
public func sec_protocol_options_add_tls_application_protocol(
    _ options: sec_protocol_options_t,
    _ application_protocol: UnsafePointer<CChar>
) {
    let name = String(cString: application_protocol)
    if !options.options.alpn.contains(name) { options.options.alpn.append(name) }
}

/// The lowest TLS version to accept. QUIC needs TLS 1.3 (RFC 9001 §4.2): a minimum above it
/// (a DTLS version) makes the tunnel or listener fail when it starts, saying why.
public func sec_protocol_options_set_min_tls_protocol_version(_ options: sec_protocol_options_t, _ version: tls_protocol_version_t) {
    options.options.tls.minimumTLSVersion = version
}

/// The highest TLS version to accept. QUIC needs TLS 1.3 (RFC 9001 §4.2): a maximum below it
/// makes the tunnel or listener fail when it starts, saying why.
public func sec_protocol_options_set_max_tls_protocol_version(_ options: sec_protocol_options_t, _ version: tls_protocol_version_t) {
    options.options.tls.maximumTLSVersion = version
}

/// The certificate chain and key this side presents. Listeners present it as their server
/// certificate; clients present it when the server asks for one (CertificateRequest, RFC 8446
/// §4.3.2). Linux note: listeners do not ask clients for certificates.
public func sec_protocol_options_set_local_identity(_ options: sec_protocol_options_t, _ identity: sec_identity_t) {
    options.options.tls.localIdentity = identity.identity
}

/// The TLS identity for `identity`, as Apple's `sec_identity_create`: nil when it holds no
/// certificate.
public func sec_identity_create(_ identity: SecIdentity) -> sec_identity_t? {
    identity.certificates.isEmpty ? nil : sec_identity_t(identity: identity)
}

/// The `SecIdentity` inside a `sec_identity_t`, as Apple's `sec_identity_copy_ref`.
public func sec_identity_copy_ref(_ identity: sec_identity_t) -> Unmanaged<SecIdentity> {
    Unmanaged.passRetained(identity.identity)
}

/// Linux only: an identity from a PEM certificate chain (leaf first) and a PEM private key,
/// where Apple platforms take a `SecIdentity` from the keychain or `SecPKCS12Import`. The files
/// are read now. Nil when either file cannot be read or parsed, or the key does not belong to
/// the certificate.
public func sec_identity_create(certificateChainPEMFile: String, privateKeyPEMFile: String) -> sec_identity_t? {
    guard let chain = try? readTLSFile(certificateChainPEMFile), let key = try? readTLSFile(privateKeyPEMFile),
        let certificates = X509Certificate.derChain(pem: chain)
    else { return nil }
    let chainPEM = String(decoding: chain, as: UTF8.self)
    let keyPEM = String(decoding: key, as: UTF8.self)
    guard (try? TLSCredentials.server(certificateChainPEM: chainPEM, privateKeyPEM: keyPEM)) != nil else { return nil }
    return sec_identity_create(
        SecIdentity(certificates: certificates.map { SecCertificate(der: Data($0)) }, certificateChainPEM: chainPEM, privateKeyPEM: keyPEM))
}

/// Adds an external pre-shared key and its identity (RFC 8446 §4.2.11; RFC 4279 in TLS 1.2),
/// as Apple's call of that name: both peers add the same key, and the handshake authenticates
/// with it instead of a certificate.
///
/// Linux notes: QUIC and TLS over TCP (`NWProtocolTLS`) both use the keys. A client offers the
/// first key added; a listener accepts any key added, by identity, and prefers it to its
/// certificate. The key exchange is ECDHE or DHE with the key where the peer allows it, else
/// the key alone. An empty key is ignored.
public func sec_protocol_options_add_pre_shared_key(_ options: sec_protocol_options_t, _ psk: dispatch_data_t, _ psk_identity: dispatch_data_t) {
    guard !psk.isEmpty else { return }
    options.options.tls.preSharedKeys.append(TLSPreSharedKey(key: Array(psk), identity: Array(psk_identity)))
}

/// The ALPN protocol the handshake agreed on, or nil.
public func sec_protocol_metadata_get_negotiated_protocol(_ metadata: sec_protocol_metadata_t) -> UnsafePointer<CChar>? {
    metadata.negotiatedProtocol.map { UnsafePointer($0) }
}

/// The server name (SNI) of the handshake, or nil.
public func sec_protocol_metadata_get_server_name(_ metadata: sec_protocol_metadata_t) -> UnsafePointer<CChar>? {
    metadata.serverName.map { UnsafePointer($0) }
}

/// The TLS version of the handshake: always TLS 1.3 for QUIC (RFC 9001 §4.2); 1.2 or 1.3 for
/// TLS over TCP.
public func sec_protocol_metadata_get_negotiated_tls_protocol_version(_ metadata: sec_protocol_metadata_t) -> tls_protocol_version_t {
    metadata.negotiatedVersion
}

/// The trust object inside a verify block's `sec_trust_t`.
public func sec_trust_copy_ref(_ trust: sec_trust_t) -> Unmanaged<SecTrust> {
    Unmanaged.passRetained(trust.trust)
}

/// The peer's certificates, leaf first, as Apple's `SecTrustCopyCertificateChain`; apps cast
/// the `CFArray` with `as? [SecCertificate]`.
public func SecTrustCopyCertificateChain(_ trust: SecTrust) -> CFArray? {
    trust.certificates.isEmpty ? nil : trust.certificates
}

/// The certificate's DER encoding, as Apple's `SecCertificateCopyData`; `as Data` reads it.
public func SecCertificateCopyData(_ certificate: SecCertificate) -> CFData {
    certificate.der
}
