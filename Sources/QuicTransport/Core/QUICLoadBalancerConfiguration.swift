import CQuicShims

/// How a server's connection IDs encode its server ID so that a QUIC-LB load balancer routes
/// every packet of a connection to it, even after the client's address changes
/// (draft-ietf-quic-load-balancers-21).
///
/// A configuration agent hands the same parameters to the balancer and to each server; only the
/// server ID differs between servers. Two algorithms are supported:
///
/// - **Plaintext** (no key, §5.3–§5.4): the server ID follows the first octet in clear.
/// - **Single-pass encrypted** (a 16-byte key, §5.4.1): the server ID and the nonce are exactly
///   one AES block, encrypted with AES-128-ECB. The four-pass algorithm for other lengths
///   (§5.4.2) is not supported, so with a key the server ID and nonce must sum to 16 bytes.
///
/// The draft's part of an ID is `first octet | server ID | nonce`; a server appends bytes for its
/// own use (§5.4), and ours appends a tag and a worker byte (see `QUICConnectionIDFactory`).
///
/// ```swift
/// let loadBalancer = try QUICLoadBalancerConfiguration(configRotation: 1, serverID: [0x0a, 0x01, 0x00])
/// ```
public struct QUICLoadBalancerConfiguration: Sendable, Equatable {
    /// Equal when every parameter is; the cipher follows from the key.
    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.configRotation == rhs.configRotation && lhs.serverID == rhs.serverID
            && lhs.nonceLength == rhs.nonceLength && lhs.key == rhs.key
    }

    /// The config rotation codepoint, the first octet's top three bits (§3.1): 0 through 6.
    /// 0b111 is reserved for unroutable IDs (§3.2), which servers without a configuration issue.
    public let configRotation: UInt8
    /// This server's ID, at least one byte (§5.1); the balancer maps it to the server's address.
    public let serverID: [UInt8]
    /// The nonce's length in bytes, at least 4 (§5.3). The server fills it so that no two IDs
    /// repeat it; a random nonce of N bits repeats after about 2^(N/2) IDs (§9.6).
    public let nonceLength: Int
    /// The AES-128-ECB key of the encrypted algorithm (§5.4.1), or nil for plaintext.
    public let key: [UInt8]?
    /// AES-128 with `key`, set up and checked once.
    private let cipher: AES128Block?

    /// The number of bytes `QUICConnectionIDFactory` appends to a plaintext ID: a 4-byte tag and
    /// the worker byte (§5.4 lets a server append bytes for its own use).
    package static let plaintextAppendedLength = 5
    /// The number of bytes appended to an encrypted ID: the worker byte.
    package static let encryptedAppendedLength = 1

    /// Checks the parameters against the draft and against what this implementation supports.
    ///
    /// - Parameters:
    ///   - configRotation: the codepoint, 0 through 6.
    ///   - serverID: at least one byte; at most 12 with a key, at most 10 without.
    ///   - nonceLength: at least 4. By default the ID stays 18 bytes long where it can: in
    ///     plaintext `max(4, 12 - serverID.count)`, with a key `16 - serverID.count`.
    ///   - key: 16 bytes to encrypt (single pass: `serverID.count + nonceLength` must be 16).
    /// - Throws: `QUICLoadBalancerConfigurationError` naming the parameter that does not fit.
    public init(
        configRotation: UInt8 = 0,
        serverID: [UInt8],
        nonceLength: Int? = nil,
        key: [UInt8]? = nil
    ) throws(QUICLoadBalancerConfigurationError) {
        guard configRotation < Self.unroutableConfigRotation else {
            throw .invalidConfigRotation(configRotation)
        }
        guard !serverID.isEmpty else { throw .emptyServerID }
        if let key, key.count != AES128Block.keyLength { throw .invalidKeyLength(key.count) }
        let longestServerID = Self.longestServerID(encrypted: key != nil)
        guard serverID.count <= longestServerID else {
            throw .serverIDTooLong(serverID.count, maximum: longestServerID)
        }
        let nonceLength = nonceLength ?? (key == nil ? max(4, 12 - serverID.count) : AES128Block.length - serverID.count)
        guard nonceLength >= Self.minimumNonceLength else { throw .nonceTooShort(nonceLength) }
        if key != nil {
            guard serverID.count + nonceLength == AES128Block.length else {
                throw .fourPassNotSupported(serverIDLength: serverID.count, nonceLength: nonceLength)
            }
        } else {
            let length = 1 + serverID.count + nonceLength + Self.plaintextAppendedLength
            guard length <= QUICConnectionID.maximumLength else {
                throw .connectionIDTooLong(serverIDLength: serverID.count, nonceLength: nonceLength)
            }
        }
        var cipher: AES128Block?
        if let key {
            guard let made = AES128Block(key: key) else { throw .invalidKeyLength(key.count) }
            cipher = made
        }
        self.configRotation = configRotation
        self.serverID = serverID
        self.nonceLength = nonceLength
        self.key = key
        self.cipher = cipher
    }

    /// The longest server ID that leaves room for a 4-byte nonce: 12 bytes in one AES block, 10
    /// in a plaintext ID of at most 20 bytes with our 5 appended bytes.
    public static func longestServerID(encrypted: Bool) -> Int {
        encrypted
            ? AES128Block.length - minimumNonceLength
            : QUICConnectionID.maximumLength - 1 - minimumNonceLength - plaintextAppendedLength
    }

    /// The draft's minimum nonce length (§5.3).
    public static let minimumNonceLength = 4
    /// The reserved codepoint of unroutable IDs (§3.2).
    package static let unroutableConfigRotation: UInt8 = 0b111

    /// Whether IDs are encrypted (single pass, §5.4.1).
    public var isEncrypted: Bool { key != nil }

    /// The length of the connection IDs a server issues with this configuration, its own appended
    /// bytes included: 18 with the default nonce length and a server ID of up to 8 bytes (12 with a key).
    public var connectionIDLength: Int {
        1 + serverID.count + nonceLength
            + (isEncrypted ? Self.encryptedAppendedLength : Self.plaintextAppendedLength)
    }

    /// What a load balancer does with an incoming Destination Connection ID (§5.5): the server ID
    /// it carries, decrypted when the configuration has a key.
    ///
    /// Returns nil when the ID is too short for the configuration or its first octet names
    /// another config rotation codepoint (§4.1, "unroutable"). Bytes past the nonce, which a
    /// server appends for its own use (§5.4), are ignored, as a balancer ignores them.
    public func serverID(of connectionID: some Collection<UInt8>) -> [UInt8]? {
        guard let plaintext = plaintextBlock(of: connectionID) else { return nil }
        return Array(plaintext.prefix(serverID.count))
    }

    /// The first octet (§3.4): the config rotation bits, then the length of the rest of an ID of
    /// `connectionIDLength` bytes (the length self-description).
    package func firstOctet(connectionIDLength: Int) -> UInt8 {
        Self.firstOctet(configRotation: configRotation, connectionIDLength: connectionIDLength)
    }

    /// The first octet for any codepoint, the unroutable one included (§3.2, §3.4).
    package static func firstOctet(configRotation: UInt8, connectionIDLength: Int) -> UInt8 {
        configRotation << 5 | UInt8((connectionIDLength - 1) & 0x1f)
    }

    /// The draft's part of a connection ID (§5.2): the first octet, then the server ID and
    /// `nonce`, encrypted as one AES block when there is a key (§5.4.1).
    ///
    /// `connectionIDLength` is the whole ID's length, appended bytes included, for the first
    /// octet's length self-description; it is `1 + serverID.count + nonceLength` in the draft's
    /// test vectors.
    package func encode(nonce: [UInt8], connectionIDLength: Int) -> [UInt8] {
        precondition(nonce.count == nonceLength, "a nonce of \(nonceLength) bytes")
        let plaintext = serverID + nonce
        let block = cipher?.encrypt(plaintext) ?? plaintext
        return [firstOctet(connectionIDLength: connectionIDLength)] + block
    }

    /// The server ID and nonce of `connectionID`, decrypted when there is a key; nil when the ID
    /// is too short or its config rotation bits are not this configuration's.
    package func plaintextBlock(of connectionID: some Collection<UInt8>) -> [UInt8]? {
        let id = Array(connectionID)
        let blockLength = serverID.count + nonceLength
        guard id.count >= 1 + blockLength, id[0] >> 5 == configRotation else { return nil }
        let block = Array(id[1...blockLength])
        return cipher?.decrypt(block) ?? block
    }
}

/// AES-128 on one block, that is AES-128-ECB, which QUIC-LB's single-pass algorithm uses
/// (draft-ietf-quic-load-balancers-21 §5.4.1), as do `QUICConnectionIDFactory`'s ID tags; and
/// the CBC-MAC of a few blocks, for its stateless reset tokens.
///
/// It runs on Nettle, the cipher library under GnuTLS, with the key schedule expanded once:
/// Nettle's block functions only read it, so one value serves every thread. GnuTLS 3.7 has no
/// ECB cipher and its cipher handles carry the CBC chaining state, so the first version set up
/// a fresh GnuTLS CBC cipher for every call: several allocations a block, sixteen blocks for
/// each connection a server accepts.
package struct AES128Block: Sendable {
    package static let length = 16
    package static let keyLength = 16
    private let encryptionKey: aes128_ctx
    private let decryptionKey: aes128_ctx

    /// Nil when the key is not 16 bytes.
    package init?(key: [UInt8]) {
        guard key.count == Self.keyLength else { return nil }
        var encryptionKey = aes128_ctx()
        nettle_aes128_set_encrypt_key(&encryptionKey, key)
        var decryptionKey = aes128_ctx()
        nettle_aes128_invert_key(&decryptionKey, &encryptionKey)
        self.encryptionKey = encryptionKey
        self.decryptionKey = decryptionKey
    }

    package func encrypt(_ block: [UInt8]) -> [UInt8] {
        precondition(block.count == Self.length, "one AES block")
        var out = block
        out.withUnsafeMutableBytes { encrypt(inPlace: $0) }
        return out
    }

    package func decrypt(_ block: [UInt8]) -> [UInt8] {
        precondition(block.count == Self.length, "one AES block")
        var out = block
        out.withUnsafeMutableBytes { out in
            let bytes = out.baseAddress!.assumingMemoryBound(to: UInt8.self)
            withUnsafePointer(to: decryptionKey) { nettle_aes128_decrypt($0, Self.length, bytes, bytes) }
        }
        return out
    }

    /// Encrypts the one block `block` holds where it is.
    package func encrypt(inPlace block: UnsafeMutableRawBufferPointer) {
        precondition(block.count == Self.length, "one AES block")
        let bytes = block.baseAddress!.assumingMemoryBound(to: UInt8.self)
        withUnsafePointer(to: encryptionKey) { nettle_aes128_encrypt($0, Self.length, bytes, bytes) }
    }

    /// CBC-MAC of `message`, a whole number of blocks, into `tag` (one block): the last block of
    /// its CBC encryption under a zero IV. A PRF over messages of one fixed length (Bellare,
    /// Kilian and Rogaway, 1994), so callers pad every message to the same length.
    package func cbcMAC(_ message: UnsafeRawBufferPointer, into tag: UnsafeMutableRawBufferPointer) {
        precondition(!message.isEmpty && message.count % Self.length == 0 && tag.count == Self.length, "whole AES blocks")
        tag.initializeMemory(as: UInt8.self, repeating: 0)
        for start in stride(from: 0, to: message.count, by: Self.length) {
            for index in 0..<Self.length { tag[index] ^= message[start + index] }
            encrypt(inPlace: tag)
        }
    }
}
