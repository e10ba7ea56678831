import CQuicShims

/// Issues this endpoint's connection IDs and the stateless reset tokens that go with them.
///
/// A server ID is 14 random bytes followed by a 4-byte tag, the first bytes of
/// HMAC-SHA-256(secret, random part). The tag lets the endpoint tell an ID it issued and forgot
/// (answer with a stateless reset, RFC 9000 §10.3) from random bytes (stay silent), so garbage
/// datagrams never draw a reply. Tokens are derived from the same secret with ngtcp2's HKDF helper,
/// so they survive the loss of connection state.
package struct QUICConnectionIDFactory: Sendable {
    package static let idLength = 18
    private static let tagLength = 4
    private let secret: [UInt8]

    package init(secret: [UInt8]? = nil) {
        if let secret {
            self.secret = secret
        } else {
            var random = [UInt8](repeating: 0, count: 32)
            _ = gnutls_rnd(GNUTLS_RND_KEY, &random, random.count)
            self.secret = random
        }
    }

    /// The secret bytes, for ngtcp2's token helpers.
    package var secretBytes: [UInt8] { secret }

    package func makeConnectionID() -> QUICConnectionID {
        var bytes = QUICConnectionID.random(length: Self.idLength - Self.tagLength).bytes
        bytes += tag(for: bytes)
        return QUICConnectionID(bytes)
    }

    /// Whether `id` carries a valid tag, that is, this endpoint (or one with the same secret) issued it.
    package func isIssuedHere(_ id: UnsafeRawBufferPointer) -> Bool {
        guard id.count == Self.idLength else { return false }
        let body = Array(id.prefix(Self.idLength - Self.tagLength))
        return tag(for: body).elementsEqual(id.suffix(Self.tagLength))
    }

    /// The 16-byte stateless reset token for `id` (RFC 9000 §10.3.2).
    package func statelessResetToken(for id: QUICConnectionID) -> [UInt8] {
        var token = [UInt8](repeating: 0, count: Int(NGTCP2_STATELESS_RESET_TOKENLEN))
        var cid = id.ngtcp2
        _ = ngtcp2_crypto_generate_stateless_reset_token(&token, secret, secret.count, &cid)
        return token
    }

    private func tag(for body: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        _ = gnutls_hmac_fast(GNUTLS_MAC_SHA256, secret, secret.count, body, body.count, &digest)
        return Array(digest.prefix(Self.tagLength))
    }
}
