import CQuicShims

/// A QUIC connection ID of 0 to 20 bytes (RFC 9000 §5.1).
///
/// The bytes are held inline, zero-padded: every datagram is routed by one of these, and an
/// inline ID neither allocates nor hashes byte by byte.
package struct QUICConnectionID: Hashable, Sendable, CustomStringConvertible {
    package static let maximumLength = Int(NGTCP2_MAX_CIDLEN)

    /// 20 bytes (`maximumLength`), past `count` always zero.
    private let storage: (UInt64, UInt64, UInt32)
    package let count: Int

    package init(_ bytes: [UInt8]) {
        (storage, count) = bytes.withUnsafeBytes { Self.pack($0) }
    }

    package init(_ cid: ngtcp2_cid) {
        var copy = cid
        (storage, count) = Swift.withUnsafeBytes(of: &copy.data) { Self.pack(UnsafeRawBufferPointer(rebasing: $0.prefix(Int(cid.datalen)))) }
    }

    package init(pointer: UnsafePointer<UInt8>, length: Int) {
        (storage, count) = Self.pack(UnsafeRawBufferPointer(start: pointer, count: length))
    }

    private static func pack(_ source: UnsafeRawBufferPointer) -> ((UInt64, UInt64, UInt32), Int) {
        precondition(source.count <= maximumLength, "a connection ID has at most 20 bytes")
        var storage: (UInt64, UInt64, UInt32) = (0, 0, 0)
        withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: source) }
        return (storage, source.count)
    }

    package var bytes: [UInt8] { withUnsafeBytes { Array($0) } }

    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try Swift.withUnsafeBytes(of: storage) { try body(UnsafeRawBufferPointer(rebasing: $0.prefix(count))) }
    }

    package static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.count == rhs.count && lhs.storage.0 == rhs.storage.0 && lhs.storage.1 == rhs.storage.1 && lhs.storage.2 == rhs.storage.2
    }

    package func hash(into hasher: inout Hasher) {
        hasher.combine(storage.0)
        hasher.combine(storage.1)
        hasher.combine(storage.2)
        hasher.combine(count)
    }

    /// Random bytes from GnuTLS's CSPRNG.
    package static func random(length: Int) -> QUICConnectionID {
        QUICConnectionID(randomBytes(length))
    }

    /// `count` bytes from GnuTLS's random generator, unpredictable to peers (RFC 9000 §5.1).
    static func randomBytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        _ = gnutls_rnd(GNUTLS_RND_RANDOM, &bytes, count)
        return bytes
    }

    package var ngtcp2: ngtcp2_cid {
        var cid = ngtcp2_cid()
        withUnsafeBytes { ngtcp2_cid_init(&cid, $0.baseAddress?.assumingMemoryBound(to: UInt8.self), $0.count) }
        return cid
    }

    package var hex: String { Hex.encode(bytes) }
    package var description: String { hex }
}
