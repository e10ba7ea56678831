import CQuicShims

/// SHA-256 digests computed with GnuTLS (`gnutls_hash_fast`), so no other crypto library is needed.
package enum SHA256 {
    /// Length of a SHA-256 digest in bytes.
    package static let byteCount = 32

    /// Returns the SHA-256 digest of `bytes`.
    package static func hash(_ bytes: UnsafeRawBufferPointer) throws -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: byteCount)
        let rc = digest.withUnsafeMutableBytes { out in
            gnutls_hash_fast(GNUTLS_DIG_SHA256, bytes.baseAddress, bytes.count, out.baseAddress)
        }
        guard rc >= 0 else { throw TLSError.gnutlsFailure(function: "gnutls_hash_fast", code: rc) }
        return digest
    }

    /// Returns the SHA-256 digest of `bytes`.
    package static func hash(_ bytes: [UInt8]) throws -> [UInt8] {
        try bytes.withUnsafeBytes { try hash($0) }
    }

    /// HMAC-SHA-256 (RFC 2104) of `message` under `key` (`gnutls_hmac_fast`).
    static func hmac(key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: byteCount)
        _ = gnutls_hmac_fast(GNUTLS_MAC_SHA256, key, key.count, message, message.count, &digest)
        return digest
    }
}

/// Lowercase hexadecimal encoding and decoding of byte strings.
package enum Hex {
    /// Encodes `bytes` as lowercase hex without separators.
    package static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes hex (either case, no separators); returns nil on odd length or a non-hex character.
    package static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count / 2)
        var index = 0
        while index < chars.count {
            guard let high = nibble(chars[index]), let low = nibble(chars[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }

    /// The value of one hex digit (either case); nil for any other byte.
    package static func nibble(_ char: UInt8) -> UInt8? {
        switch char {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): char - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): char - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): char - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
