import CQuicShims

/// Issues this endpoint's connection IDs and the stateless reset tokens that go with them.
///
/// Every ID has the QUIC-LB shape (draft-ietf-quic-load-balancers-21 §3, §5): a first octet
/// with three config-rotation bits and the ID's length less one (§3.3), then the bytes a load
/// balancer routes by, then fields for this server's own use (§5.4 lets a server append them).
/// Three layouts, chosen by the `QUICLoadBalancerConfiguration`:
///
///     none:      first octet | random (12)                        | tag (4) | worker (1)   18 bytes
///     plaintext: first octet | server ID | nonce                  | tag (4) | worker (1)   ≤ 20 bytes
///     encrypted: first octet | AES-128-ECB(server ID | nonce) (16)          | worker (1)   18 bytes
///
/// - **None**: the rotation bits are the unroutable codepoint 0b111 (§3.2), which tells any
///   balancer to fall back to the 4-tuple.
/// - **Plaintext** (§5.3, §5.4): the server ID in clear, then a random nonce.
/// - **Encrypted**, single pass (§5.4.1): server ID and nonce are one AES block. The nonce's
///   last byte is the worker's index in clear and the rest is random, so two workers never
///   produce the same ciphertext (§7.2, "Server Process Demultiplexing").
///
/// The appended fields:
/// - The **tag** is the first 4 bytes of AES-128(tag key, the bytes before it, zero-padded to a
///   block); the tag key is the first 16 bytes of HMAC-SHA-256(secret, "quic connection id tag").
///   The bytes before it are at most 15 and their length is fixed per factory, so one block
///   cipher call is a PRF over them, at a fraction of an HMAC's cost: the tag is made for every ID
///   issued and checked for every datagram with an unknown ID. It lets the endpoint tell an ID it
///   issued and forgot (answer with a stateless reset, RFC 9000 §10.3) from random bytes (stay
///   silent), so garbage never draws a reply. Encrypted IDs have no tag: the decrypted server ID
///   and the worker byte inside the block check them instead.
/// - The **worker** byte, always the last, names the worker (event loop and socket) that owns
///   the connection, so the kernel's reuseport program and the workers themselves can steer
///   packets to it. It is masked with a keyed hash of the 4 bytes before it
///   (`QUICWorkerSteering`), as the draft's §7.2, "Server Process Demultiplexing" proposes, so the
///   byte does not link a connection's IDs.
///
/// Reset tokens (RFC 9000 §10.3.2) are a keyed PRF of the ID: the AES-128 CBC-MAC of its length
/// and bytes, zero-padded to two blocks. The key is the first 16 bytes of
/// HMAC-SHA-256(reset secret, "quic stateless reset token"), and the reset secret is
/// HMAC-SHA-256(secret, "quic stateless reset" | server ID). So tokens survive the loss of
/// connection state, and hosts that share a secret behind one balancer never make each other's
/// tokens. Every worker of an endpoint shares the secret; each has its own `worker` byte. A
/// server issues eight tokens per connection: ngtcp2's HKDF helper made each a visible part of
/// a handshake; the CBC-MAC, on Nettle with the key expanded once, costs a small fraction of it.
package struct QUICConnectionIDFactory: Sendable {
    /// The length of every ID this factory issues.
    package let idLength: Int
    /// The worker this factory issues IDs for.
    package private(set) var worker: UInt8
    /// How the worker byte is masked; the same for every worker of the endpoint.
    package let steering: QUICWorkerSteering
    /// The QUIC-LB configuration the IDs follow; nil for unroutable IDs.
    package let loadBalancer: QUICLoadBalancerConfiguration?
    private static let tagLength = 4
    private static let unconfiguredRandomLength = 12
    private let secret: [UInt8]
    /// The keyed function behind this host's stateless reset tokens, bound to its server ID.
    private let resetTokenCipher: AES128Block
    /// The keyed function behind each ID's tag.
    private let tagCipher: AES128Block

    package init(secret: [UInt8]? = nil, loadBalancer: QUICLoadBalancerConfiguration? = nil, worker: UInt8 = 0) {
        if let secret {
            self.secret = secret
        } else {
            var random = [UInt8](repeating: 0, count: 32)
            _ = gnutls_rnd(GNUTLS_RND_KEY, &random, random.count)
            self.secret = random
        }
        self.loadBalancer = loadBalancer
        self.idLength = loadBalancer?.connectionIDLength ?? 1 + Self.unconfiguredRandomLength + Self.tagLength + 1
        self.worker = worker
        self.steering = QUICWorkerSteering(secret: self.secret)
        let resetSecret = SHA256.hmac(key: self.secret, Array("quic stateless reset".utf8) + (loadBalancer?.serverID ?? []))
        let resetTokenKey = Array(SHA256.hmac(key: resetSecret, Array("quic stateless reset token".utf8)).prefix(AES128Block.keyLength))
        let tagKey = Array(SHA256.hmac(key: self.secret, Array("quic connection id tag".utf8)).prefix(AES128Block.keyLength))
        guard let tagCipher = AES128Block(key: tagKey), let resetTokenCipher = AES128Block(key: resetTokenKey) else {
            preconditionFailure("the keys are 16 bytes")
        }
        self.tagCipher = tagCipher
        self.resetTokenCipher = resetTokenCipher
    }

    /// The same endpoint's factory for another worker: same secret, layout and mask.
    package func forWorker(_ worker: UInt8) -> QUICConnectionIDFactory {
        var factory = self
        factory.worker = worker
        return factory
    }

    /// The secret bytes, for ngtcp2's token helpers.
    package var secretBytes: [UInt8] { secret }

    /// Where the worker byte sits in an ID, counted from its first byte.
    package var workerByteOffset: Int { idLength - 1 }

    /// The first octet of every ID this factory issues (§3.3).
    private var firstOctet: UInt8 {
        QUICLoadBalancerConfiguration.firstOctet(
            configRotation: loadBalancer?.configRotation ?? QUICLoadBalancerConfiguration.unroutableConfigRotation,
            connectionIDLength: idLength
        )
    }

    /// Whether the server ID and nonce are one AES block (§5.4.1), which carries no tag.
    private var isEncrypted: Bool { loadBalancer?.isEncrypted ?? false }

    package func makeConnectionID() -> QUICConnectionID {
        withUnsafeTemporaryAllocation(byteCount: QUICConnectionID.maximumLength, alignment: 1) { id in
            var length: Int
            if let loadBalancer {
                var nonce = QUICConnectionID.randomBytes(loadBalancer.nonceLength)
                if isEncrypted { nonce[nonce.count - 1] = worker }
                let encoded = loadBalancer.encode(nonce: nonce, connectionIDLength: idLength)
                id.copyBytes(from: encoded)
                length = encoded.count
            } else {
                id[0] = firstOctet
                _ = gnutls_rnd(GNUTLS_RND_RANDOM, id.baseAddress! + 1, Self.unconfiguredRandomLength)
                length = 1 + Self.unconfiguredRandomLength
            }
            if !isEncrypted {
                writeTag(of: UnsafeRawBufferPointer(rebasing: id[..<length]), to: UnsafeMutableRawBufferPointer(rebasing: id[length..<(length + Self.tagLength)]))
                length += Self.tagLength
            }
            id[length] = worker ^ steering.mask(id[(length - 4)..<length])
            length += 1
            precondition(length == idLength, "the layout fills the ID exactly")
            return QUICConnectionID(pointer: id.baseAddress!.assumingMemoryBound(to: UInt8.self), length: length)
        }
    }

    /// The worker that owns `id`, if `id` has this endpoint's length; the value is only
    /// meaningful for IDs this endpoint issued, and may name a worker that does not exist.
    package func worker(of id: UnsafeRawBufferPointer) -> UInt8? {
        guard id.count == idLength else { return nil }
        return id[workerByteOffset] ^ steering.mask(id[(workerByteOffset - 4)..<workerByteOffset])
    }

    /// Whether this host issued `id` (or one with the same secret and server ID), so that it may
    /// answer with a stateless reset.
    ///
    /// An ID of another host behind the same balancer is not ours, even if the hosts share the
    /// secret: its first octet, server ID or tag differs, and a host that receives a misrouted
    /// packet stays silent rather than reset a connection it does not own. Encrypted IDs carry no
    /// tag: the decrypted server ID must be ours and the worker byte inside the block must equal
    /// the unmasked one outside it, whose mask depends on the secret.
    package func isIssuedHere(_ id: UnsafeRawBufferPointer) -> Bool {
        guard id.count == idLength, id[0] == firstOctet else { return false }
        guard let loadBalancer else { return hasValidTag(id) }
        guard let plaintext = loadBalancer.plaintextBlock(of: id), plaintext.starts(with: loadBalancer.serverID) else {
            return false
        }
        guard isEncrypted else { return hasValidTag(id) }
        return plaintext.last == worker(of: id)
    }

    /// The 16-byte stateless reset token for `id` (RFC 9000 §10.3.2), from this host's reset secret.
    package func statelessResetToken(for id: QUICConnectionID) -> [UInt8] {
        // One length byte and at most 20 ID bytes fit two blocks; every message is two blocks long.
        withUnsafeTemporaryAllocation(byteCount: 2 * AES128Block.length, alignment: 1) { message in
            message.initializeMemory(as: UInt8.self, repeating: 0)
            message[0] = UInt8(id.count)
            id.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: message[1...]).copyMemory(from: $0) }
            return [UInt8](unsafeUninitializedCapacity: AES128Block.length) { token, count in
                resetTokenCipher.cbcMAC(UnsafeRawBufferPointer(message), into: UnsafeMutableRawBufferPointer(token))
                count = AES128Block.length
            }
        }
    }

    private func hasValidTag(_ id: UnsafeRawBufferPointer) -> Bool {
        let tagStart = idLength - 1 - Self.tagLength
        return withUnsafeTemporaryAllocation(byteCount: Self.tagLength, alignment: 1) { tag in
            writeTag(of: UnsafeRawBufferPointer(rebasing: id[..<tagStart]), to: tag)
            return tag.elementsEqual(id[tagStart..<(tagStart + Self.tagLength)])
        }
    }

    /// Writes the 4-byte tag of `body`, the ID's bytes before it, to `tag`.
    private func writeTag(of body: UnsafeRawBufferPointer, to tag: UnsafeMutableRawBufferPointer) {
        precondition(body.count < AES128Block.length, "an ID's bytes before its tag fit one block")
        withUnsafeTemporaryAllocation(byteCount: AES128Block.length, alignment: 1) { block in
            block.initializeMemory(as: UInt8.self, repeating: 0)
            block.copyMemory(from: body)
            tagCipher.encrypt(inPlace: block)
            tag.copyMemory(from: UnsafeRawBufferPointer(rebasing: block[..<Self.tagLength]))
        }
    }

}

/// The keyed mask over a connection ID's worker byte: the top byte of
/// `word × multiplier + addend` (mod 2³²), where `word` is the 4 bytes before the worker byte
/// read big-endian.
///
/// Two multiply-adds are what a classic BPF program can compute, so the kernel's reuseport
/// program (`QUICReuseportGroup.steeringProgram`) unmasks the byte as the workers do. Without the key an
/// observer sees a byte that changes with every ID of a connection.
package struct QUICWorkerSteering: Sendable, Equatable {
    package let multiplier: UInt32
    package let addend: UInt32

    init(secret: [UInt8]) {
        let digest = SHA256.hmac(key: secret, Array("quic worker steering".utf8))
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

