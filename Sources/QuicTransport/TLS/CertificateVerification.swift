import CQuicShims
import Dispatch
import NIOConcurrencyHelpers

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
    /// Let the application decide on the chain; the trust store is not consulted. This is what
    /// `sec_protocol_options_set_verify_block` sets.
    case custom(CertificateVerifier)

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

/// A decision on the server's certificate chain that the application makes itself, as a
/// Network.framework verify block does.
///
/// The handshake waits for the answer on its event loop, for at most `answerTimeout`; a verifier
/// that never answers rejects the peer. Answer from any thread; only the first answer counts.
public struct CertificateVerifier: Sendable, Equatable {
    /// What the verifier sees of the peer.
    public struct Peer: Sendable {
        /// The DER certificates the server presented, leaf first.
        public let certificateChain: [[UInt8]]
        /// The name the client verifies against: SNI, or the address it connected to.
        public let serverName: String
        /// The ALPN protocol the server chose (its EncryptedExtensions come before its Certificate).
        public let negotiatedALPN: String?
    }

    /// How long a handshake waits for `verify` to answer.
    public static let answerTimeout: Duration = .seconds(10)

    /// Identity for `==`: two verifiers are equal when they are the same one.
    private final class Identity: Sendable {}
    private let identity = Identity()
    let verify: @Sendable (Peer, @escaping @Sendable (Bool) -> Void) -> Void

    /// `verify` gets the peer and calls the completion once, with `true` to trust it.
    public init(_ verify: @escaping @Sendable (Peer, @escaping @Sendable (Bool) -> Void) -> Void) {
        self.verify = verify
    }

    public static func == (lhs: CertificateVerifier, rhs: CertificateVerifier) -> Bool { lhs.identity === rhs.identity }

    /// Asks the verifier and waits for its answer: nil to trust the peer, or why not.
    func decide(on peer: Peer) -> TLSVerificationFailure? {
        let answer = NIOLockedValueBox<Bool?>(nil)
        let answered = DispatchSemaphore(value: 0)
        verify(peer) { trusted in
            let first = answer.withLockedValue { value in
                defer { if value == nil { value = trusted } }
                return value == nil
            }
            if first { answered.signal() }
        }
        let seconds = Double(Self.answerTimeout.components.seconds)
        guard answered.wait(timeout: .now() + seconds) == .success else {
            return .other("the certificate verifier did not answer within \(Int(seconds)) s")
        }
        return answer.withLockedValue { $0 } == true ? nil : .rejectedByVerifier
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
    case .custom(let verifier):
        let chain = peerCertificateChain(session)
        guard !chain.isEmpty else { return .noPeerCertificate }
        let alpn = negotiatedALPN(session)
        return verifier.decide(on: .init(certificateChain: chain, serverName: serverName, negotiatedALPN: alpn))
    case .pinnedSHA256(let expected):
        guard let leaf = peerCertificateChain(session).first else { return .noPeerCertificate }
        let actual: [UInt8]
        do {
            actual = try leaf.withUnsafeBytes { try SHA256.hash($0) }
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

/// The DER certificates the peer presented, leaf first.
func peerCertificateChain(_ session: gnutls_session_t) -> [[UInt8]] {
    var count: UInt32 = 0
    guard let chain = gnutls_certificate_get_peers(session, &count) else { return [] }
    return (0..<Int(count)).map { Array(UnsafeRawBufferPointer(start: chain[$0].data, count: Int(chain[$0].size))) }
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
