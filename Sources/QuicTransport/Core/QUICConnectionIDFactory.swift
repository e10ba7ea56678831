import CQuicShims

/// Issues this endpoint's connection IDs and the stateless reset tokens that go with them.
///
/// Every ID has the QUIC-LB shape (draft-ietf-quic-load-balancers-21 §3, §5): a first octet
/// with three config-rotation bits and the ID's length less one, then the bytes a load balancer
/// routes by, then two fields for this server's own use (§5.4 lets a server append them):
///
///     first octet | random (12) | tag (4) | worker (1)          18 bytes, no configuration
///
/// Without a load-balancer configuration the rotation bits are the unroutable codepoint 0b111
/// (§3.2), which tells any balancer to fall back to the 4-tuple.
///
/// - The **tag** is the first 4 bytes of HMAC-SHA-256(secret, the bytes before it). It lets the
///   endpoint tell an ID it issued and forgot (answer with a stateless reset, RFC 9000 §10.3)
///   from random bytes (stay silent), so garbage never draws a reply.
/// - The **worker** byte names the worker (event loop and socket) that owns the connection, so
///   the kernel's reuseport program and the workers themselves can steer packets to it. It is
///   masked with a keyed hash of the 4 bytes before it (`QUICWorkerSteering`), as the draft's
///   §"Server Process Demultiplexing" proposes, so the byte does not link a connection's IDs.
///
/// Reset tokens are derived from the same secret with ngtcp2's HKDF helper, so they survive the
/// loss of connection state. Every worker of an endpoint shares the secret; each has its own
/// `worker` byte.
package struct QUICConnectionIDFactory: Sendable {
    /// The length of every ID this factory issues.
    package let idLength: Int
    /// The worker this factory issues IDs for.
    package let worker: UInt8
    /// How the worker byte is masked; the same for every worker of the endpoint.
    package let steering: QUICWorkerSteering
    private static let tagLength = 4
    private static let unroutableConfigRotation: UInt8 = 0b111
    private let secret: [UInt8]

    package init(secret: [UInt8]? = nil, worker: UInt8 = 0) {
        if let secret {
            self.secret = secret
        } else {
            var random = [UInt8](repeating: 0, count: 32)
            _ = gnutls_rnd(GNUTLS_RND_KEY, &random, random.count)
            self.secret = random
        }
        self.idLength = 18
        self.worker = worker
        self.steering = QUICWorkerSteering(secret: self.secret)
    }

    /// The same endpoint's factory for another worker: same secret, layout and mask.
    package func forWorker(_ worker: UInt8) -> QUICConnectionIDFactory {
        QUICConnectionIDFactory(copying: self, worker: worker)
    }

    private init(copying other: QUICConnectionIDFactory, worker: UInt8) {
        self.idLength = other.idLength
        self.secret = other.secret
        self.steering = other.steering
        self.worker = worker
    }

    /// The secret bytes, for ngtcp2's token helpers.
    package var secretBytes: [UInt8] { secret }

    /// Where the worker byte sits in an ID, counted from its first byte.
    package var workerByteOffset: Int { idLength - 1 }

    package func makeConnectionID() -> QUICConnectionID {
        var bytes = [UInt8](repeating: 0, count: idLength)
        _ = gnutls_rnd(GNUTLS_RND_RANDOM, &bytes, idLength)
        bytes[0] = Self.unroutableConfigRotation << 5 | UInt8(idLength - 1)
        let tagStart = idLength - 1 - Self.tagLength
        let tag = self.tag(for: bytes[..<tagStart])
        bytes.replaceSubrange(tagStart..<(tagStart + Self.tagLength), with: tag)
        bytes[workerByteOffset] = worker ^ steering.mask(bytes[(workerByteOffset - 4)..<workerByteOffset])
        return QUICConnectionID(bytes)
    }

    /// The worker that owns `id`, if `id` has this endpoint's length; the value is only
    /// meaningful for IDs this endpoint issued, and may name a worker that does not exist.
    package func worker(of id: UnsafeRawBufferPointer) -> UInt8? {
        guard id.count == idLength else { return nil }
        return id[workerByteOffset] ^ steering.mask(id[(workerByteOffset - 4)..<workerByteOffset])
    }

    /// Whether `id` carries a valid tag, that is, this endpoint (or one with the same secret) issued it.
    package func isIssuedHere(_ id: UnsafeRawBufferPointer) -> Bool {
        guard id.count == idLength else { return false }
        let tagStart = idLength - 1 - Self.tagLength
        return tag(for: id[..<tagStart]).elementsEqual(id[tagStart..<(tagStart + Self.tagLength)])
    }

    /// The 16-byte stateless reset token for `id` (RFC 9000 §10.3.2).
    package func statelessResetToken(for id: QUICConnectionID) -> [UInt8] {
        var token = [UInt8](repeating: 0, count: Int(NGTCP2_STATELESS_RESET_TOKENLEN))
        var cid = id.ngtcp2
        _ = ngtcp2_crypto_generate_stateless_reset_token(&token, secret, secret.count, &cid)
        return token
    }

    private func tag<Bytes: Collection<UInt8>>(for body: Bytes) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        let body = Array(body)
        _ = gnutls_hmac_fast(GNUTLS_MAC_SHA256, secret, secret.count, body, body.count, &digest)
        return Array(digest.prefix(Self.tagLength))
    }
}

/// The keyed mask over a connection ID's worker byte: the top byte of
/// `word × multiplier + addend` (mod 2³²), where `word` is the 4 bytes before the worker byte
/// read big-endian.
///
/// Two multiply-adds are what a classic BPF program can compute, so the kernel's reuseport
/// program (`QUICReuseportSteering`) unmasks the byte as the workers do. Without the key an
/// observer sees a byte that changes with every ID of a connection.
package struct QUICWorkerSteering: Sendable, Equatable {
    package let multiplier: UInt32
    package let addend: UInt32

    init(secret: [UInt8]) {
        var digest = [UInt8](repeating: 0, count: 32)
        let label = Array("quic worker steering".utf8)
        _ = gnutls_hmac_fast(GNUTLS_MAC_SHA256, secret, secret.count, label, label.count, &digest)
        let word = { (at: Int) in digest[at..<(at + 4)].reduce(UInt32(0)) { $0 << 8 | UInt32($1) } }
        multiplier = word(0) | 1
        addend = word(4)
    }

    /// The mask for the 4 bytes `word`, in packet order.
    package func mask<Bytes: Collection<UInt8>>(_ word: Bytes) -> UInt8 {
        let value = word.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        return UInt8(truncatingIfNeeded: (value &* multiplier &+ addend) >> 24)
    }
}
