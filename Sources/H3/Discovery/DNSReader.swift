#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// Reads big-endian integers and (possibly compressed) names from a DNS message.
struct DNSReader {
    let message: [UInt8]
    var position: Int

    mutating func readUInt16() -> UInt16? {
        guard position + 2 <= message.count else { return nil }
        defer { position += 2 }
        return UInt16(message[position]) << 8 | UInt16(message[position + 1])
    }

    mutating func readUInt32() -> UInt32? {
        guard let high = readUInt16(), let low = readUInt16() else { return nil }
        return UInt32(high) << 16 | UInt32(low)
    }

    /// A domain name, following compression pointers (RFC 1035 §4.1.4) at most 16 times.
    mutating func readName() -> String? {
        var labels: [String] = []
        var cursor = position
        var jumped = false
        var jumps = 0
        while true {
            guard cursor < message.count else { return nil }
            let length = Int(message[cursor])
            if length == 0 {
                if !jumped { position = cursor + 1 }
                return labels.isEmpty ? "." : labels.joined(separator: ".")
            }
            if length & 0xc0 == 0xc0 {
                guard cursor + 1 < message.count, jumps < 16 else { return nil }
                if !jumped { position = cursor + 2 }
                cursor = (length & 0x3f) << 8 | Int(message[cursor + 1])
                jumped = true
                jumps += 1
                continue
            }
            guard length <= 63, cursor + 1 + length <= message.count else { return nil }
            labels.append(String(decoding: message[(cursor + 1)..<(cursor + 1 + length)], as: UTF8.self))
            cursor += 1 + length
        }
    }
}
