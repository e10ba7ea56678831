import Crypto
import Foundation

/// The bytes the examples' large downloads send and their uploads carry: byte i is i mod 251,
/// a period prime to every power of two, so a piece lost or repeated changes the digest.
public enum Pattern {
    public static func byte(at offset: Int) -> UInt8 { UInt8(offset % 251) }

    /// One period of the pattern, twice, so any period-long window is one slice of it.
    private static let periods = (0..<502).map(byte(at:))

    /// `count` bytes of the pattern from `offset`, copied a period at a time: fast enough for
    /// 50 MB in a debug build.
    public static func bytes(from offset: Int, count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count)
        let phase = offset % 251
        while bytes.count < count {
            bytes.append(contentsOf: periods[phase..<phase + min(251, count - bytes.count)])
        }
        return bytes
    }

    /// The SHA-256 of the first `total` bytes, in lowercase hex.
    public static func sha256Hex(total: Int) -> String {
        var hash = IncrementalSHA256()
        var offset = 0
        while offset < total {
            let count = min(1 << 20, total - offset)
            hash.update(bytes(from: offset, count: count))
            offset += count
        }
        return hash.hex
    }
}

/// SHA-256 fed piece by piece. Not `Sendable`: swift-crypto 3, which the Hummingbird example
/// resolves, does not mark its hash functions so.
public struct IncrementalSHA256 {
    private var hash = SHA256()
    public init() {}
    public mutating func update(_ bytes: [UInt8]) { hash.update(data: bytes) }
    public var hex: String { hash.finalize().map { String(format: "%02x", $0) }.joined() }
}
