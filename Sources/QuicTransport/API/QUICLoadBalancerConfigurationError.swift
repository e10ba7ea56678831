/// A QUIC-LB configuration that does not fit draft-ietf-quic-load-balancers-21, or that needs
/// what this implementation leaves out (four-pass encryption).
public struct QUICLoadBalancerConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Code: Sendable, Equatable {
        case invalidConfigRotation(UInt8)
        case emptyServerID
        case serverIDTooLong(Int, maximum: Int)
        case nonceTooShort(Int)
        case invalidKeyLength(Int)
        case fourPassNotSupported(serverIDLength: Int, nonceLength: Int)
        case connectionIDTooLong(serverIDLength: Int, nonceLength: Int)
        case cipherUnavailable
    }

    private let code: Code

    private init(_ code: Code) { self.code = code }

    /// The config rotation codepoint is 0b111, reserved for unroutable IDs (§3.2), or does not
    /// fit in three bits.
    public static func invalidConfigRotation(_ value: UInt8) -> Self { Self(.invalidConfigRotation(value)) }

    /// The server ID is empty; it has at least one byte (§5.1).
    public static let emptyServerID = Self(.emptyServerID)

    /// The server ID leaves no room for a 4-byte nonce: at most 12 bytes with a key, 10 without
    /// (see `QUICLoadBalancerConfiguration.longestServerID(encrypted:)`).
    public static func serverIDTooLong(_ length: Int, maximum: Int) -> Self {
        Self(.serverIDTooLong(length, maximum: maximum))
    }

    /// The nonce is shorter than 4 bytes (§5.3).
    public static func nonceTooShort(_ length: Int) -> Self { Self(.nonceTooShort(length)) }

    /// The key is not 16 bytes (AES-128).
    public static func invalidKeyLength(_ length: Int) -> Self { Self(.invalidKeyLength(length)) }

    /// With a key, the server ID and nonce do not make one 16-byte block, which would need the
    /// four-pass algorithm (§5.4.2); only single-pass encryption (§5.4.1) is supported.
    public static func fourPassNotSupported(serverIDLength: Int, nonceLength: Int) -> Self {
        Self(.fourPassNotSupported(serverIDLength: serverIDLength, nonceLength: nonceLength))
    }

    /// A plaintext ID would exceed QUIC v1's 20 bytes (RFC 9000 §17.2) once this server's 5
    /// bytes are appended.
    public static func connectionIDTooLong(serverIDLength: Int, nonceLength: Int) -> Self {
        Self(.connectionIDTooLong(serverIDLength: serverIDLength, nonceLength: nonceLength))
    }

    /// GnuTLS could not set up AES-128 with the key. No longer thrown: AES-128 now runs on
    /// Nettle, which takes any 16-byte key; a key of another length is `invalidKeyLength`.
    @available(*, deprecated, message: "no longer thrown: any 16-byte key is accepted")
    public static let cipherUnavailable = Self(.cipherUnavailable)

    public var description: String {
        switch code {
        case .invalidConfigRotation(let value) where value == QUICLoadBalancerConfiguration.unroutableConfigRotation:
            "config rotation 7 (0b111) is reserved for unroutable connection IDs; use 0 through 6"
        case .invalidConfigRotation(let value):
            "config rotation \(value) does not fit in the first octet's three bits; use 0 through 6"
        case .emptyServerID:
            "the server ID must have at least one byte"
        case .nonceTooShort(let length):
            "the nonce must have at least 4 bytes, not \(length)"
        case .serverIDTooLong(let length, let maximum):
            "a server ID of \(length) bytes leaves no room for a 4-byte nonce; at most \(maximum) bytes"
                + (maximum == QUICLoadBalancerConfiguration.longestServerID(encrypted: true) ? " with a key" : " without a key")
        case .invalidKeyLength(let length):
            "the QUIC-LB key must be 16 bytes (AES-128), not \(length)"
        case .fourPassNotSupported(let serverIDLength, let nonceLength):
            "with a key, the server ID and nonce must sum to 16 bytes (single-pass encryption);"
                + " \(serverIDLength) + \(nonceLength) would need four-pass encryption, which is not supported"
        case .connectionIDTooLong(let serverIDLength, let nonceLength):
            "a server ID of \(serverIDLength) bytes and a nonce of \(nonceLength) make a connection ID of"
                + " \(1 + serverIDLength + nonceLength + QUICLoadBalancerConfiguration.plaintextAppendedLength)"
                + " bytes with this server's 5 appended bytes; QUIC allows 20"
        case .cipherUnavailable:
            "GnuTLS cannot set up AES-128 with this key"
        }
    }
}
