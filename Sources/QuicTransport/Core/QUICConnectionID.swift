import CQuicShims

/// A QUIC connection ID of 0 to 20 bytes (RFC 9000 §5.1).
package struct QUICConnectionID: Hashable, Sendable, CustomStringConvertible {
    package static let maximumLength = Int(NGTCP2_MAX_CIDLEN)

    package let bytes: [UInt8]

    package init(_ bytes: [UInt8]) {
        precondition(bytes.count <= Self.maximumLength, "a connection ID has at most 20 bytes")
        self.bytes = bytes
    }

    package init(_ cid: ngtcp2_cid) {
        var copy = cid
        self.bytes = withUnsafeBytes(of: &copy.data) { Array($0.prefix(Int(cid.datalen))) }
    }

    package init(pointer: UnsafePointer<UInt8>, length: Int) {
        self.bytes = Array(UnsafeBufferPointer(start: pointer, count: length))
    }

    /// Random bytes from GnuTLS's CSPRNG.
    package static func random(length: Int) -> QUICConnectionID {
        var bytes = [UInt8](repeating: 0, count: length)
        _ = gnutls_rnd(GNUTLS_RND_RANDOM, &bytes, length)
        return QUICConnectionID(bytes)
    }

    package var ngtcp2: ngtcp2_cid {
        var cid = ngtcp2_cid()
        bytes.withUnsafeBufferPointer { ngtcp2_cid_init(&cid, $0.baseAddress, $0.count) }
        return cid
    }

    package var hex: String { Hex.encode(bytes) }
    package var description: String { hex }
}
