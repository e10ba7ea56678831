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
// DER certificates, the server name, the negotiated protocol). The one addition is
// `sec_identity_create(certificateChainPEMFile:privateKeyPEMFile:)`, since there is no keychain
// to take a `SecIdentity` from.

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

/// A certificate chain and private key for the local side of TLS.
public final class sec_identity_t: Sendable {
    let certificateChainFile: String
    let privateKeyFile: String

    init(certificateChainFile: String, privateKeyFile: String) {
        self.certificateChainFile = certificateChainFile
        self.privateKeyFile = privateKeyFile
    }
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
            let trust = SecTrust(certificates: peer.certificateChain.map { SecCertificate(der: Data($0)) }, serverName: peer.serverName)
            let metadata = sec_protocol_metadata_t(negotiated: peer.negotiatedALPN, serverName: peer.serverName)
            verify_block_queue.async { block.block(metadata, sec_trust_t(trust: trust), complete) }
        }
    )
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

/// The certificate chain and key this side presents. Listeners use it as their server
/// certificate. Linux note: client certificates are not supported yet, so clients ignore it.
public func sec_protocol_options_set_local_identity(_ options: sec_protocol_options_t, _ identity: sec_identity_t) {
    options.options.tls.certificateChainFile = identity.certificateChainFile
    options.options.tls.privateKeyFile = identity.privateKeyFile
}

/// Linux only: an identity from a PEM certificate chain (leaf first) and a PEM private key,
/// where Apple platforms take a `SecIdentity` from the keychain. Nil when either file cannot
/// be read or parsed, or the key does not belong to the certificate.
public func sec_identity_create(certificateChainPEMFile: String, privateKeyPEMFile: String) -> sec_identity_t? {
    guard (try? TLSCredentials.server(certificateChainFile: certificateChainPEMFile, privateKeyFile: privateKeyPEMFile)) != nil else {
        return nil
    }
    return sec_identity_t(certificateChainFile: certificateChainPEMFile, privateKeyFile: privateKeyPEMFile)
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

/// The peer's certificates, leaf first. Apple returns a `CFArray`; apps cast it with
/// `as? [SecCertificate]`, which compiles here too.
public func SecTrustCopyCertificateChain(_ trust: SecTrust) -> [SecCertificate]? {
    trust.certificates.isEmpty ? nil : trust.certificates
}

/// The certificate's DER encoding. Apple returns `CFData`; `as Data` compiles here too.
public func SecCertificateCopyData(_ certificate: SecCertificate) -> Data {
    certificate.der
}
