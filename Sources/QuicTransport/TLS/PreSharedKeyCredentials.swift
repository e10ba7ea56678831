import CQuicShims
#if canImport(Glibc)
import Glibc
#endif

/// An external pre-shared key and the identity that names it (RFC 8446 §4.2.11; RFC 4279 for
/// TLS 1.2), as `sec_protocol_options_add_pre_shared_key` adds them.
package struct TLSPreSharedKey: Sendable, Equatable {
    /// The secret, used as is (GnuTLS's `GNUTLS_PSK_KEY_RAW`).
    package let key: [UInt8]
    /// The identity the client sends in the clear, and the server looks the key up by.
    package let identity: [UInt8]
}

/// The single owner of a GnuTLS PSK credentials object, for a client or a server session.
///
/// A client offers its first key's identity. A server answers with the key whose identity the
/// client sent, through `lookup`, a GnuTLS callback that finds the keys from the session.
/// The key exchange stays (EC)DHE where both sides allow it (`psk_dhe_ke`, RFC 8446 §4.2.9), so
/// the session keeps forward secrecy. Keep this object alive as long as the session.
final class PreSharedKeyCredentials {
    private enum Handle {
        case client(gnutls_psk_client_credentials_t)
        case server(gnutls_psk_server_credentials_t)
    }

    private let handle: Handle

    /// The key exchanges of a priority string when keys are present: PSK with ECDHE or DHE
    /// first, then PSK alone, then GnuTLS's `NORMAL` certificate exchanges. A server adds
    /// `%SERVER_PRECEDENCE`, so it picks the key over its certificate in TLS 1.2 as well, where
    /// the key exchange is part of the cipher suite (TLS 1.3 takes a known key anyway).
    static func priorityAddition(server: Bool) -> String {
        (server ? ":%SERVER_PRECEDENCE" : "") + ":-KX-ALL:+ECDHE-PSK:+DHE-PSK:+PSK:+ECDHE-ECDSA:+ECDHE-RSA:+RSA:+DHE-RSA"
    }

    /// Client credentials offering `key`.
    init(client key: TLSPreSharedKey) throws {
        var raw: gnutls_psk_client_credentials_t?
        try checkGnuTLS(gnutls_psk_allocate_client_credentials(&raw), "gnutls_psk_allocate_client_credentials")
        handle = .client(raw!)
        let rc = withDatum(key.identity) { identity in
            withDatum(key.key) { secret in gnutls_psk_set_client_credentials2(raw, &identity, &secret, GNUTLS_PSK_KEY_RAW) }
        }
        try checkGnuTLS(rc, "gnutls_psk_set_client_credentials2")
    }

    /// A server's callback from the identity a client sent to its key (see `answer`).
    typealias Lookup = @convention(c) (gnutls_session_t?, UnsafePointer<gnutls_datum_t>?, UnsafeMutablePointer<gnutls_datum_t>?) -> Int32

    /// Server credentials that ask `lookup` for the key of the identity a client sent.
    init(serverLookup lookup: Lookup) throws {
        var raw: gnutls_psk_server_credentials_t?
        try checkGnuTLS(gnutls_psk_allocate_server_credentials(&raw), "gnutls_psk_allocate_server_credentials")
        handle = .server(raw!)
        gnutls_psk_set_server_credentials_function2(raw, lookup)
    }

    deinit {
        switch handle {
        case .client(let raw): gnutls_psk_free_client_credentials(raw)
        case .server(let raw): gnutls_psk_free_server_credentials(raw)
        }
    }

    /// Adds these credentials to `session`, beside its certificate credentials.
    func attach(to session: gnutls_session_t) throws {
        let pointer: UnsafeMutableRawPointer
        switch handle {
        case .client(let raw): pointer = UnsafeMutableRawPointer(raw)
        case .server(let raw): pointer = UnsafeMutableRawPointer(raw)
        }
        try checkGnuTLS(gnutls_credentials_set(session, GNUTLS_CRD_PSK, pointer), "gnutls_credentials_set(PSK)")
    }

    /// Copies the key for `identity` among `keys` into `key`, in memory GnuTLS frees; for a
    /// server's lookup callback. Returns 0, or -1 when no key has that identity, which fails
    /// the handshake.
    static func answer(
        identity: UnsafePointer<gnutls_datum_t>?, from keys: [TLSPreSharedKey], into key: UnsafeMutablePointer<gnutls_datum_t>?
    ) -> Int32 {
        guard let identity, let key, let data = identity.pointee.data else { return -1 }
        let asked = Array(UnsafeBufferPointer(start: data, count: Int(identity.pointee.size)))
        guard let match = keys.first(where: { $0.identity == asked }), !match.key.isEmpty, let copy = gnutlsMalloc(match.key.count) else {
            return -1
        }
        match.key.withUnsafeBytes { copy.copyMemory(from: $0.baseAddress!, byteCount: match.key.count) }
        key.pointee = gnutls_datum_t(data: copy.assumingMemoryBound(to: UInt8.self), size: UInt32(match.key.count))
        return 0
    }
}
