#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// A DNS HTTPS resource record (RFC 9460, type 65): how to reach a service before the first
/// connection, including whether it speaks HTTP/3 (`alpn=h3`) and on which port.
public struct HTTPSRecord: Hashable, Sendable {
    /// 0 is AliasMode (the record only names another host); 1 and up is ServiceMode, lower first.
    public var priority: UInt16
    /// The target host; "." means the owner name itself (RFC 9460 §2.5).
    public var target: String
    /// The `alpn` SvcParam: protocol IDs the service offers, such as `h3` (RFC 9460 §7.1);
    /// empty when absent.
    public var alpn: [String] = []
    /// The `no-default-alpn` SvcParam: the default protocol (`http/1.1`) is not offered, only
    /// those in `alpn` (RFC 9460 §7.1).
    public var noDefaultALPN = false
    /// The `port` SvcParam (RFC 9460 §7.2); nil means the origin's own port.
    public var port: UInt16?
    /// The `ipv4hint` SvcParam: IPv4 addresses in dotted-decimal form (RFC 9460 §7.3); empty
    /// when absent.
    public var ipv4Hints: [String] = []
    /// The `ipv6hint` SvcParam: IPv6 addresses in text form (RFC 9460 §7.3); empty when absent.
    public var ipv6Hints: [String] = []

    /// Whether this is an AliasMode record, priority 0, that only names another host
    /// (RFC 9460 §2.4.2).
    public var isAlias: Bool { priority == 0 }

    /// SvcParamKeys (RFC 9460 §14.3.2).
    enum Key: UInt16 {
        case mandatory = 0, alpn = 1, noDefaultALPN = 2, port = 3, ipv4Hint = 4, ech = 5, ipv6Hint = 6
    }

    /// Parses the RDATA of one HTTPS record (RFC 9460 §2.2); nil when it is malformed.
    static func parse(rdata: ArraySlice<UInt8>, message: [UInt8]) -> HTTPSRecord? {
        var reader = DNSReader(message: message, position: rdata.startIndex)
        let end = rdata.endIndex
        guard let priority = reader.readUInt16(), let target = reader.readName() else { return nil }
        var record = HTTPSRecord(priority: priority, target: target)
        var lastKey: Int = -1
        while reader.position < end {
            guard let key = reader.readUInt16(), let length = reader.readUInt16(),
                reader.position + Int(length) <= end, Int(key) > lastKey
            else { return nil }  // Keys must be strictly increasing (RFC 9460 §2.2).
            lastKey = Int(key)
            let value = Array(message[reader.position..<(reader.position + Int(length))])
            reader.position += Int(length)
            switch Key(rawValue: key) {
            case .alpn:
                var index = 0
                while index < value.count {
                    let count = Int(value[index])
                    guard count > 0, index + 1 + count <= value.count else { return nil }
                    record.alpn.append(String(decoding: value[(index + 1)..<(index + 1 + count)], as: UTF8.self))
                    index += 1 + count
                }
            case .noDefaultALPN:
                record.noDefaultALPN = true
            case .port:
                guard value.count == 2 else { return nil }
                record.port = UInt16(value[0]) << 8 | UInt16(value[1])
            case .ipv4Hint:
                guard value.count % 4 == 0, !value.isEmpty else { return nil }
                record.ipv4Hints = stride(from: 0, to: value.count, by: 4).map { value[$0..<($0 + 4)].map(String.init).joined(separator: ".") }
            case .ipv6Hint:
                guard value.count % 16 == 0, !value.isEmpty else { return nil }
                record.ipv6Hints = stride(from: 0, to: value.count, by: 16).map { start in
                    var address = in6_addr()
                    withUnsafeMutableBytes(of: &address) { $0.copyBytes(from: value[start..<(start + 16)]) }
                    var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
                    inet_ntop(AF_INET6, &address, &text, socklen_t(text.count))
                    return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                }
            case .mandatory, .ech, nil:
                continue  // Not needed to connect; unknown keys are skipped (RFC 9460 §2.2).
            }
        }
        return record
    }
}
